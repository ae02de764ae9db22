# CMake generated Testfile for 
# Source directory: /work/main/launcher
# Build directory: /work/main/build/launcher
# 
# This file includes the relevant testing commands required for 
# testing this directory and lists subdirectories to be tested as well.
