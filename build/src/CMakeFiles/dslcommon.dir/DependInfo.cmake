
# Consider dependencies only in project.
set(CMAKE_DEPENDS_IN_PROJECT_ONLY OFF)

# The set of languages for which implicit dependencies are needed:
set(CMAKE_DEPENDS_LANGUAGES
  )

# The set of dependency files which are needed:
set(CMAKE_DEPENDS_DEPENDENCY_FILES
  "/work/main/src/common/dynbuf.c" "src/CMakeFiles/dslcommon.dir/common/dynbuf.c.o" "gcc" "src/CMakeFiles/dslcommon.dir/common/dynbuf.c.o.d"
  "/work/main/src/common/error.c" "src/CMakeFiles/dslcommon.dir/common/error.c.o" "gcc" "src/CMakeFiles/dslcommon.dir/common/error.c.o.d"
  "/work/main/src/common/log.c" "src/CMakeFiles/dslcommon.dir/common/log.c.o" "gcc" "src/CMakeFiles/dslcommon.dir/common/log.c.o.d"
  "/work/main/src/common/net.c" "src/CMakeFiles/dslcommon.dir/common/net.c.o" "gcc" "src/CMakeFiles/dslcommon.dir/common/net.c.o.d"
  "/work/main/src/common/parse.c" "src/CMakeFiles/dslcommon.dir/common/parse.c.o" "gcc" "src/CMakeFiles/dslcommon.dir/common/parse.c.o.d"
  "/work/main/src/common/strvec.c" "src/CMakeFiles/dslcommon.dir/common/strvec.c.o" "gcc" "src/CMakeFiles/dslcommon.dir/common/strvec.c.o.d"
  "/work/main/src/common/xalloc.c" "src/CMakeFiles/dslcommon.dir/common/xalloc.c.o" "gcc" "src/CMakeFiles/dslcommon.dir/common/xalloc.c.o.d"
  )

# Targets to which this target links.
set(CMAKE_TARGET_LINKED_INFO_FILES
  )

# Fortran module output directory.
set(CMAKE_Fortran_TARGET_MODULE_DIR "")
