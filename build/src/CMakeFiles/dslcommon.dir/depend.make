# Empty dependencies file for dslcommon.
# This may be replaced when dependencies are built.
