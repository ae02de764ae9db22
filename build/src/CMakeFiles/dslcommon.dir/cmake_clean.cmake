file(REMOVE_RECURSE
  "CMakeFiles/dslcommon.dir/common/dynbuf.c.o"
  "CMakeFiles/dslcommon.dir/common/dynbuf.c.o.d"
  "CMakeFiles/dslcommon.dir/common/error.c.o"
  "CMakeFiles/dslcommon.dir/common/error.c.o.d"
  "CMakeFiles/dslcommon.dir/common/log.c.o"
  "CMakeFiles/dslcommon.dir/common/log.c.o.d"
  "CMakeFiles/dslcommon.dir/common/net.c.o"
  "CMakeFiles/dslcommon.dir/common/net.c.o.d"
  "CMakeFiles/dslcommon.dir/common/parse.c.o"
  "CMakeFiles/dslcommon.dir/common/parse.c.o.d"
  "CMakeFiles/dslcommon.dir/common/strvec.c.o"
  "CMakeFiles/dslcommon.dir/common/strvec.c.o.d"
  "CMakeFiles/dslcommon.dir/common/xalloc.c.o"
  "CMakeFiles/dslcommon.dir/common/xalloc.c.o.d"
  "libdslcommon.a"
  "libdslcommon.pdb"
)

# Per-language clean rules from dependency scanning.
foreach(lang C)
  include(CMakeFiles/dslcommon.dir/cmake_clean_${lang}.cmake OPTIONAL)
endforeach()
