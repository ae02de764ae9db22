#!/bin/sh
# Move the banned.h include after the last #include of each given .c file.
for f in "$@"; do
  grep -v '#include "dslaunch/common/banned.h"' "$f" > "$f.tmp"
  last=$(grep -n '^#include' "$f.tmp" | tail -1 | cut -d: -f1)
  sed -i "${last}a #include \"dslaunch/common/banned.h\"" "$f.tmp"
  mv "$f.tmp" "$f"
done
