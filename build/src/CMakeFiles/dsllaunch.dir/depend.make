# Empty dependencies file for dsllaunch.
# This may be replaced when dependencies are built.
