#!/usr/bin/env python3
"""Rewrite a .cu file's kernel launches for the CPU emulation (emu.h): every
`NAME<<<GRID, BLOCK, SHMEM, s>>>(ARGS)` becomes
`emu_launch(dim3(GRID), dim3(BLOCK), &NAME, SHMEM)(ARGS)` (SHMEM: the dynamic shared memory
in bytes), every `extern __shared__ [__align__(N)] TYPE NAME[];` becomes
`TYPE *NAME = (TYPE *)emu_dyn_smem;` (the launch's buffer, 128-byte aligned), emu.h is
included before cuda_kernels.h (the model's or the device's) and `#include <mma.h>` is
dropped (emu.h emulates WMMA).
usage: launches.py IN.cu OUT.cpp"""
import re
import sys

src = open(sys.argv[1]).read()
out, i = [], 0
while True:
    j = src.find("<<<", i)
    if j < 0:
        out.append(src[i:])
        break
    m = re.search(r"(dsl_k_\w+(?:<[\w, ]+>)?)\s*$", src[:j])
    if not m:
        sys.exit(f"{sys.argv[1]}: a launch without a dsl_k_ kernel name before offset {j}")
    name, start = m.group(1), m.start(1)
    e = src.find(">>>", j)
    depth, parts, cur = 0, [], ""
    for ch in src[j + 3:e]:
        depth += ch in "([" and 1 or ch in ")]" and -1 or 0
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    parts.append(cur)
    shm = parts[2].strip() if len(parts) > 2 else "0"
    out.append(src[i:start] + f"emu_launch(dim3({parts[0].strip()}), dim3({parts[1].strip()}), &{name}, {shm})")
    i = e + 3
text = re.sub(r"extern __shared__ (?:__align__\(\d+\) )?(\w+) (\w+)\[\];", r"\1 *\2 = (\1 *)emu_dyn_smem;", "".join(out))
text = re.sub(r'#include "((?:dslaunch/device/)?cuda_kernels\.h)"', r'#include "emu.h"\n#include "\1"', text)
text = text.replace("#include <mma.h>\n", "")
open(sys.argv[2], "w").write(text)
