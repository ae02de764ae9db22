file(REMOVE_RECURSE
  "CMakeFiles/dsllaunch.dir/launch/hostfile.c.o"
  "CMakeFiles/dsllaunch.dir/launch/hostfile.c.o.d"
  "CMakeFiles/dsllaunch.dir/launch/placement.c.o"
  "CMakeFiles/dsllaunch.dir/launch/placement.c.o.d"
  "libdsllaunch.a"
  "libdsllaunch.pdb"
)

# Per-language clean rules from dependency scanning.
foreach(lang C)
  include(CMakeFiles/dsllaunch.dir/cmake_clean_${lang}.cmake OPTIONAL)
endforeach()
