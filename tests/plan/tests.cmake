# dslplan, one unit test per part: the command line (options), hostfile and host ranges,
# placement and world-info encoding, the exported environment (envexport), a Slurm
# allocation as the job's hosts, the srun command line of the slurm transport, and no-ssh
# mode's settings (options, PET_*, JOB_COMPLETION_INDEX, the secret).
foreach(t hostfile placement envexport options allocation srun nossh)
  dsl_unit_test(test_${t} SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_${t}.c LIBS dslplan)
endforeach()
# Its fuzz targets: a hostfile, the --include/--exclude filters, an env file, dslaunch's
# whole command line (parse only) with no-ssh mode's settings from it and the
# environment and the --launcher_args splitter, and a Slurm allocation's environment.
foreach(t hostfile filter envfile options allocation)
  dsl_fuzz_target(fuzz_${t} SOURCES ${CMAKE_CURRENT_LIST_DIR}/fuzz_${t}.c LIBS dslplan)
endforeach()
