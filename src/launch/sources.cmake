add_library(dsllaunch STATIC
  ${CMAKE_CURRENT_LIST_DIR}/hostfile.c
  ${CMAKE_CURRENT_LIST_DIR}/placement.c
  ${CMAKE_CURRENT_LIST_DIR}/hostrange.c
  ${CMAKE_CURRENT_LIST_DIR}/envexport.c
  ${CMAKE_CURRENT_LIST_DIR}/options.c
  ${CMAKE_CURRENT_LIST_DIR}/proto.c
  ${CMAKE_CURRENT_LIST_DIR}/spawn.c
  ${CMAKE_CURRENT_LIST_DIR}/agent.c
  ${CMAKE_CURRENT_LIST_DIR}/transport_local.c
  ${CMAKE_CURRENT_LIST_DIR}/job.c
  ${CMAKE_CURRENT_LIST_DIR}/job_preflight.c
  ${CMAKE_CURRENT_LIST_DIR}/launch.c
  ${CMAKE_CURRENT_LIST_DIR}/doctor.c ${CMAKE_CURRENT_LIST_DIR}/doctor_report.c ${CMAKE_CURRENT_LIST_DIR}/facts.c
  ${CMAKE_CURRENT_LIST_DIR}/doctor_bench.c)
target_link_libraries(dsllaunch PUBLIC dslcommon PkgConfig::CJSON ${CMAKE_DL_LIBS})
target_compile_options(dsllaunch PRIVATE ${DSL_SRC_WARNINGS})
# multi-node pieces: network facts, quoting, connect-back, pdsh and (with libssh) ssh transports
target_sources(dsllaunch PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/netinfo.c
  ${CMAKE_CURRENT_LIST_DIR}/shellquote.c
  ${CMAKE_CURRENT_LIST_DIR}/connectback.c
  ${CMAKE_CURRENT_LIST_DIR}/transport_pdsh.c
  ${CMAKE_CURRENT_LIST_DIR}/transport_openmpi.c
  ${CMAKE_CURRENT_LIST_DIR}/authkeys.c)
target_compile_definitions(dsllaunch PUBLIC DSL_HAVE_PDSH_TRANSPORT=1
  DSL_HAVE_OPENMPI_TRANSPORT=1)
if(DSL_WITH_SSH)
  target_sources(dsllaunch PRIVATE ${CMAKE_CURRENT_LIST_DIR}/transport_ssh.c
    ${CMAKE_CURRENT_LIST_DIR}/sshsession.c ${CMAKE_CURRENT_LIST_DIR}/sync.c)
  target_sources(dsllaunch PRIVATE ${CMAKE_CURRENT_LIST_DIR}/sshsetup.c
    ${CMAKE_CURRENT_LIST_DIR}/sshfiles.c ${CMAKE_CURRENT_LIST_DIR}/sshlocal.c)
  target_link_libraries(dsllaunch PUBLIC PkgConfig::LIBSSH)
  target_compile_definitions(dsllaunch PUBLIC DSL_HAVE_SSH_TRANSPORT=1)
endif()
