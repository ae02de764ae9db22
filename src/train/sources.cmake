# The worker side: rendezvous store + collectives (comm.cmake), configuration and the
# pure training arithmetic (config.cmake), model, data and the trainer (trainer.cmake).
foreach(part comm config trainer)
  if(EXISTS ${CMAKE_CURRENT_LIST_DIR}/${part}.cmake)
    include(${CMAKE_CURRENT_LIST_DIR}/${part}.cmake)
  endif()
endforeach()
