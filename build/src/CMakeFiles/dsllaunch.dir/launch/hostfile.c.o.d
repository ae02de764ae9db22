src/CMakeFiles/dsllaunch.dir/launch/hostfile.c.o: \
 /work/main/src/launch/hostfile.c /usr/include/stdc-predef.h
