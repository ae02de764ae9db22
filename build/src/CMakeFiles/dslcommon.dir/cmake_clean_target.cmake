file(REMOVE_RECURSE
  "libdslcommon.a"
)
