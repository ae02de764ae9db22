src/CMakeFiles/dsllaunch.dir/launch/placement.c.o: \
 /work/main/src/launch/placement.c /usr/include/stdc-predef.h
