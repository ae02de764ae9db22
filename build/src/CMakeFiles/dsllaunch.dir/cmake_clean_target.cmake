file(REMOVE_RECURSE
  "libdsllaunch.a"
)
