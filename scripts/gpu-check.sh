#!/usr/bin/env bash
# The GPU check, built here and run there. GPU hosts on clusters often have the CUDA
# runtime but no compiler, no -dev packages, no package registry and no network, so
# nothing is built on them:
#
#   scripts/gpu-check.sh bundle [BUILD_DIR]   on a machine with the CUDA 13 toolkit
#   scripts/gpu-check.sh run BUNDLE_DIR       on the GPU host
#
# bundle: configures BUILD_DIR (default build-gpu, ignored by git) as a Release build
# for sm_90 (CUDA_ARCH=90; oneDNN left out: only the CPU's bf16 products use it, and
# it would add 40 MB), builds it (JOBS=2), collects into BUILD_DIR/bundle.tree
#   libexec/  the binaries of every CTest test labelled gpu, and dstrain, dslaunch,
#             dsbench (stripped);
#   bin/      a small sh wrapper per binary that puts the bundle's lib/ and CUDA's
#             lib64 on LD_LIBRARY_PATH and execs libexec/NAME, so scripts that also run
#             python3 (the e2e test, the benchmark) give the bundle's libraries to
#             dslaunch's programs only;
#   lib/      every shared library those binaries load that is not glibc's, CUDA's or
#             NCCL's (the binaries link none of CUDA's or NCCL's: the CUDA runtime is
#             static and cuBLAS and NCCL are opened on first use, found through the
#             wrapper's LD_LIBRARY_PATH or the system's) (libssh and its Kerberos libraries, libcjson, libcrypto,
#             libopenblas with libgfortran and libquadmath, libstdc++, ...), found with
#             ldd; the tree is then checked to resolve with nothing else;
#   src/      the test scripts the gpu tests run, bench/gpt_gpu.sh and the PyTorch peer
#             bench/peers/torch_gpt2_gpu.py, as built;
#   tests.tsv one line per test: name, the exit status that means skip, command: the
#             tests labelled gpu, and the bit-identity tests per OpenBLAS kernel family
#             (label blascore) whose names match BLAS_TESTS (the unit ones and the
#             worlds and stages cases), so that the GPU host's CPU, another kind of
#             CPU than the build machine's, checks the CPU guarantees too;
# and packs it into BUILD_DIR/bundle/gpu-check.tar.gz (about 21 MiB; the tree is 63),
# the one thing to bring to the GPU host. It refuses a pack over BUNDLE_MAX_MIB (60).
#
# run: BUNDLE_DIR is that folder (or the .tar.gz, or an unpacked tree), unpacked into
# a temporary folder. On the GPU host (CUDA runtime and cuBLAS in /usr/local/cuda/lib64
# or $CUDA_HOME/lib64, NCCL in the system library path, python3; PyTorch for the
# peer) it runs every gpu test's command directly (not through ctest, whose files name
# this machine's paths), then bench/gpt_gpu.sh (dstrain, GPT-2 124M shapes, bf16,
# world 1, micro batch 16, BENCH_STEPS=30 steps; its GPU time per phase from dstrain's
# CUDA-event timers goes into the table), the same with the cuBLASLt epilogues off
# (EPILOGUES=off, AB_STEPS=20 steps; 0 leaves it out) and the PyTorch peer in eager mode and under
# torch.compile (PEER_STEPS=30 each; after the profile, so that torch.compile's compile
# time, the most expensive step, is the one a short deadline cuts), and the one-step
# profile: bench/gpt_gpu.sh with
# PROFILE_STEP=3 (dstrain counts its launches per step in a first run, then Nsight
# Compute, `ncu --clock-control none --metrics gpu__time_duration.sum`, profiles step 3
# alone: the window dstrain opens around it, capped by --launch-count; PROFILE_MODE=skip
# uses --launch-skip/--launch-count instead), and prints a table last: each test's pass,
# fail or skip, the four tokens/s and dstrain's ratio to each, the GPU time per phase,
# the launches per step and the profiled step's top kernels by time. PROFILE=0 leaves the profile out. Logs go to
# $OUT/gpu-check (the device tool's $OUT) or /tmp/gpu-check. Every step gets at most
# what is left of DEADLINE_S (270) seconds, so the table comes out within it. On a
# machine without a GPU every gpu test skips (77), the benchmarks say n/a, and the exit
# status is 0 when the CPU tests pass. BENCH=0 runs the tests alone. Exit status: 1 if
# a test or a benchmark failed, else 0.
set -u

usage() {
    echo "usage: $0 bundle [BUILD_DIR] | $0 run BUNDLE_DIR" >&2
    exit 2
}

ROOT=$(cd "$(dirname "$0")/.." && pwd)

# ---- bundle ---------------------------------------------------------------------

# glibc, CUDA and NCCL: what a GPU host has; everything else ldd shows goes in lib/
is_system_lib() { # NAME PATH
    case $1 in
    linux-vdso.so.* | ld-linux*.so.* | libc.so.* | libm.so.* | libdl.so.* | libpthread.so.* | \
        librt.so.* | libresolv.so.* | libutil.so.* | libanl.so.* | libmvec.so.* | \
        libnss_*.so.* | libcuda.so.* | libcudart.so.* | libcublas.so.* | libcublasLt.so.* | \
        libnccl.so.* | libnvidia-*.so.* | libnvrtc*.so.* | libnvJitLink.so.*) return 0 ;;
    esac
    case $2 in /usr/local/cuda*) return 0 ;; esac
    return 1
}

# "NAME PATH" for each library ldd resolves for the ELF file $1; "NAME not-found" too
ldd_libs() {
    ldd "$1" 2>/dev/null | awk '/=>/ { print $1, ($3 == "not" ? "not-found" : $3) }
                                !/=>/ && $1 ~ /^\// { n = $1; sub(".*/", "", n); print n, $1 }'
}

bundle() {
    local build=${1:-$ROOT/build-gpu} arch=${CUDA_ARCH:-90} jobs=${JOBS:-2}
    local b=$build/bundle.tree out=$build/bundle max=${BUNDLE_MAX_MIB:-60} f name path bad=0
    command -v nvcc >/dev/null || [ -x /usr/local/cuda/bin/nvcc ] ||
        { echo "gpu-check: no nvcc: bundle needs the CUDA toolkit" >&2; return 1; }
    echo "== configure and build $build (sm_$arch, Release)"
    mkdir -p "$build" || return 1
    cmake -S "$ROOT" -B "$build" -DDSL_WITH_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES="$arch" \
        -DCMAKE_BUILD_TYPE=Release -DDSL_WITH_DNNL=OFF -DDSL_WERROR=OFF >"$build/gpu-check.cmake.log" 2>&1 ||
        { tail -n 30 "$build/gpu-check.cmake.log" >&2; return 1; }
    cmake --build "$build" -j"$jobs" >"$build/gpu-check.build.log" 2>&1 ||
        { grep -E "error|Error" "$build/gpu-check.build.log" | head -n 30 >&2; return 1; }
    rm -rf "$b" "$out"
    mkdir -p "$out" "$b/bin" "$b/libexec" "$b/lib" "$b/src"
    # the gpu tests, and the bit-identity tests per OpenBLAS kernel family (label
    # blascore; those of BLAS_TESTS, a regex on the name) on the GPU host's own CPU,
    # which is a second kind of CPU to hold the CPU guarantees on
    ctest --test-dir "$build" -L 'gpu|blascore' --show-only=json-v1 >"$build/gpu-tests.json" ||
        return 1

    # tests.tsv and the files the tests name: ELF files from the build tree go to
    # libexec/ (named bin/NAME in the commands), files from the source tree to src/
    python3 - "$build/gpu-tests.json" "$ROOT" "$build" "$b" \
        "${BLAS_TESTS:-^(test_[a-z_]*|train_ranks_worlds|train_ranks_stages|train_gpt_worlds)@}" \
        <<'PY' || return 1
import glob, json, os, re, shutil, sys
spec, root, build, b, blas = sys.argv[1:]
root, build = os.path.realpath(root), os.path.realpath(build)
tests = json.load(open(spec))["tests"]
if not tests:
    sys.exit("gpu-check: ctest lists no test labelled gpu (a build without CUDA?)")
def is_elf(p):
    with open(p, "rb") as f:
        return f.read(4) == b"\x7fELF"
lines = []
for t in tests:
    props = {p["name"]: p["value"] for p in t.get("properties", [])}
    labels = props.get("LABELS", [])
    if "gpu" not in labels and (not re.search(blas, t["name"]) or props.get("ENVIRONMENT")):
        continue
    # run mode runs every test in a scratch folder: a working directory in the build
    # tree (CTest's default) is no loss; an environment would be
    wd = os.path.realpath(props.get("WORKING_DIRECTORY", build))
    if props.get("ENVIRONMENT") or not (wd + "/").startswith(build + "/"):
        sys.exit(f"gpu-check: test {t['name']}: ENVIRONMENT or a WORKING_DIRECTORY outside "
                 "the build tree is not carried into the bundle yet")
    args = []
    for a in t["command"]:
        p = os.path.realpath(a) if os.path.isabs(a) else None
        if p and os.path.isfile(p) and p.startswith(build + "/") and is_elf(p):
            shutil.copy2(p, f"{b}/libexec/")
            args.append("@B@/bin/" + os.path.basename(p))
        elif p and os.path.isfile(p) and p.startswith(root + "/"):
            rel = os.path.relpath(p, root)
            os.makedirs(os.path.dirname(f"{b}/src/{rel}"), exist_ok=True)
            # with the scripts beside it, which it may source
            for q in [p] + glob.glob(os.path.dirname(p) + "/*.sh"):
                shutil.copy2(q, os.path.dirname(f"{b}/src/{rel}"))
            args.append("@B@/src/" + rel)
        elif p and not os.path.exists(p) and not a.startswith("/bin/") and not a.startswith("/usr/"):
            sys.exit(f"gpu-check: test {t['name']}: '{a}' is missing")
        else:
            if "\t" in a:
                sys.exit(f"gpu-check: test {t['name']}: a tab in '{a}'")
            args.append(os.path.basename(a) if a in ("/bin/sh", "/usr/bin/sh") else a)
    skip = props.get("SKIP_RETURN_CODE", "")
    lines.append("\t".join([t["name"], str(skip)] + args))
with open(f"{b}/tests.tsv", "w") as f:
    f.write("\n".join(lines) + "\n")
print(f"{len(lines)} tests: " + ", ".join(l.split("\t")[0] for l in lines))
PY
    for name in dstrain dslaunch dsbench; do
        cp "$build/$name" "$b/libexec/" || return 1
    done
    for f in bench/gpt_gpu.sh bench/peers/torch_gpt2_gpu.py; do
        mkdir -p "$b/src/$(dirname "$f")"
        cp -p "$ROOT/$f" "$b/src/$f" || return 1
    done
    strip --strip-unneeded "$b"/libexec/* 2>/dev/null

    for f in "$b"/libexec/*; do
        name=$(basename "$f")
        cat >"$b/bin/$name" <<EOF
#!/bin/sh
# $name from the GPU check's bundle (scripts/gpu-check.sh): its libraries, then CUDA's
here=\$(cd "\$(dirname "\$0")/.." && pwd)
LD_LIBRARY_PATH=\$here/lib:\${CUDA_HOME:-/usr/local/cuda}/lib64\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}
export LD_LIBRARY_PATH
exec "\$here/libexec/$name" "\$@"
EOF
        chmod +x "$b/bin/$name"
    done

    # the libraries, until nothing new turns up (a bundled library's own needs too)
    local added=1
    while [ "$added" -eq 1 ]; do
        added=0
        for f in "$b"/libexec/* "$b"/lib/*; do
            [ -f "$f" ] || continue
            while read -r name path; do
                is_system_lib "$name" "$path" && continue
                [ -e "$b/lib/$name" ] && continue
                [ "$path" = not-found ] && { echo "gpu-check: $f needs $name, not found here" >&2; return 1; }
                cp -L "$path" "$b/lib/$name" && added=1
            done < <(ldd_libs "$f")
        done
    done
    # the check: with lib/ and CUDA first, every library resolves to lib/ or the system
    for f in "$b"/libexec/* "$b"/lib/*; do
        while read -r name path; do
            case $path in
            "$b"/lib/*) ;;
            not-found) echo "gpu-check: $(basename "$f"): $name not found" >&2; bad=1 ;;
            *) is_system_lib "$name" "$path" ||
                { echo "gpu-check: $(basename "$f"): $name from $path, not the bundle" >&2; bad=1; } ;;
            esac
        done < <(LD_LIBRARY_PATH=$b/lib:/usr/local/cuda/lib64 ldd_libs "$f")
    done
    [ "$bad" -eq 0 ] || return 1
    # openblas alone is 36 MB: the tree goes as one gzip'd tar (a third of the size;
    # tar and gzip are on any host)
    tar -C "$b" -czf "$out/gpu-check.tar.gz" . || return 1
    local bytes tbytes
    bytes=$(du -sb "$b" | cut -f1)
    tbytes=$(du -sb "$out" | cut -f1)
    echo "== bundle $out: $(ls "$b/libexec" | wc -l) binaries, $(ls "$b/lib" | wc -l)" \
        "libraries, $((bytes / 1048576)) MiB unpacked, $((tbytes / 1048576)) MiB packed"
    ls "$b/lib" | tr '\n' ' '
    echo
    if [ "$tbytes" -gt $((max * 1048576)) ]; then
        echo "gpu-check: the bundle is over BUNDLE_MAX_MIB=$max MiB" >&2
        return 1
    fi
    echo "run it on the GPU host: scripts/gpu-check.sh run $out"
}

# ---- run ------------------------------------------------------------------------

T0=$(date +%s)
left() { # seconds of DEADLINE_S left, at least 5 (a step always gets to start and fail)
    local l=$(( ${DEADLINE_S:-270} - ($(date +%s) - T0) ))
    echo $(( l < 5 ? 5 : l ))
}
cap() { # SECONDS: the smaller of SECONDS and what is left
    local l
    l=$(left)
    echo $(( $1 < l ? $1 : l ))
}

# tokens/s from a log: dstrain's result line ("... N tokens/s, ...") or the peer's
tokens() { sed -n 's/^\(gpt_gpu\|torch [a-z]*\): .* \([0-9][0-9]*\) tokens\/s.*/\2/p' "$1" | tail -n 1; }

run() {
    local b log name skip rc verdict here=$PWD
    # the bundle: a folder with gpu-check.tar.gz (what bundle makes), that file, or
    # the unpacked tree
    local tgz=${1:-}
    [ -d "$tgz" ] && tgz=$tgz/gpu-check.tar.gz
    if [ -f "$tgz" ]; then
        UNPACKED=$(mktemp -d "${TMPDIR:-/tmp}/gpu-check.XXXXXX") || return 1
        trap 'rm -rf "$UNPACKED"' EXIT
        b=$UNPACKED
        tar -C "$b" -xzf "$tgz" || { echo "gpu-check: cannot unpack '$tgz'" >&2; return 1; }
    elif [ -f "${1:-}/tests.tsv" ]; then
        b=$(cd "$1" && pwd)
    else
        echo "gpu-check: no bundle at '${1:-}'" >&2
        usage
    fi
    log=${OUT:-/tmp}/gpu-check
    mkdir -p "$log" && log=$(cd "$log" && pwd) || return 1
    local -a names=() verdicts=()
    local failed=0
    echo "== gpu-check run: bundle $b, logs in $log, deadline ${DEADLINE_S:-270} s"
    if command -v nvidia-smi >/dev/null; then
        nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
    else
        echo "no nvidia-smi"
    fi
    echo "CPU: $(sed -n 's/^model name[^:]*: //p' /proc/cpuinfo | head -n 1), $(nproc) cores"

    while IFS=$'\t' read -r name skip cmd; do
        [ -n "$name" ] || continue
        local -a argv=()
        IFS=$'\t' read -r -a argv <<<"${cmd//@B@/$b}"
        echo "== test $name"
        mkdir -p "$log/work" && cd "$log/work" || return 1
        timeout -k 5 "$(cap "${TEST_TIMEOUT_S:-240}")" "${argv[@]}" </dev/null \
            >"$log/${name//@/-}.log" 2>&1
        rc=$?
        cd "$here" || return 1
        if [ "$rc" -eq 0 ]; then
            verdict=pass
        elif [ -n "$skip" ] && [ "$rc" -eq "$skip" ]; then
            verdict=skip
        elif [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
            verdict="fail (timed out)"
        else
            verdict="fail (exit $rc)"
        fi
        case $verdict in fail*) failed=1; tail -n 15 "$log/${name//@/-}.log" ;; esac
        echo "$name: $verdict"
        names+=("$name")
        verdicts+=("$verdict")
    done <"$b/tests.tsv"

    local steps=${BENCH_STEPS:-30} psteps=${PEER_STEPS:-30} mb=${MICRO_BATCH:-16}
    local t_ds="" t_eager="" t_comp="" s_ds="" s_eager="" s_comp=""
    if [ "${BENCH:-1}" = 0 ]; then # the tests alone
        echo
        echo "== summary ($(( $(date +%s) - T0 )) s)"
        printf '%-36s %s\n' test result
        for i in "${!names[@]}"; do
            printf '%-36s %s\n' "${names[$i]}" "${verdicts[$i]}"
        done
        return "$failed"
    fi
    # bench/gpt_gpu.sh (with the caller's environment) into $log/NAME.log, at most CAP
    # seconds: sets t_bench (its tokens/s, or empty) and s_bench (ok, n/a, fail)
    local t_bench s_bench
    gpt_bench() { # NAME STEPS CAP
        timeout -k 5 "$(cap "$3")" sh "$b/src/bench/gpt_gpu.sh" "$b/bin" "$2" "$mb" \
            </dev/null >"$log/$1.log" 2>&1
        rc=$?
        t_bench=$(tokens "$log/$1.log")
        if [ -n "$t_bench" ]; then
            s_bench=ok
        elif grep -q "no GPU to run on" "$log/$1.log"; then
            s_bench="n/a (no GPU)"
        else
            s_bench="fail (exit $rc)"
            failed=1
        fi
    }
    echo "== bench/gpt_gpu.sh: dstrain, GPT-2 124M shapes, bf16, world 1, mb $mb, $steps steps"
    gpt_bench gpt_gpu "$steps" 120
    t_ds=$t_bench s_ds=$s_bench
    tail -n 2 "$log/gpt_gpu.log"

    # the A/B of the cuBLASLt epilogues: the same benchmark with plain GEMMs and the
    # separate bias/GELU kernels, short (the ratio is what counts)
    local t_noepi="" s_noepi="skipped (AB_STEPS=0)" absteps=${AB_STEPS:-20}
    if [ "$absteps" != 0 ]; then
        echo "== bench/gpt_gpu.sh with EPILOGUES=off, mb $mb, $absteps steps"
        EPILOGUES=off gpt_bench gpt_gpu_noepi "$absteps" 60
        t_noepi=$t_bench s_noepi=$s_bench
    fi

    # the one-step profile: Nsight Compute over step 3 of a 3-step run (gpt_gpu.sh)
    local s_prof="skipped (PROFILE=0)"
    if [ "${PROFILE:-1}" != 0 ]; then
        echo "== profile: one step of dstrain's GPT under Nsight Compute (bench/gpt_gpu.sh PROFILE_STEP=3)"
        PROFILE_STEP=3 PROFILE_MODE=${PROFILE_MODE:-range} timeout -k 5 "$(cap 150)" \
            sh "$b/src/bench/gpt_gpu.sh" "$b/bin" 3 "$mb" </dev/null >"$log/profile.log" 2>&1
        rc=$?
        if grep -q "^gpt_gpu profile: .* kernels profiled" "$log/profile.log"; then
            s_prof=ok
        elif grep -q "no GPU to run on" "$log/profile.log"; then
            s_prof="n/a (no GPU)"
        elif grep -q "no Nsight Compute" "$log/profile.log"; then
            s_prof="n/a (no ncu)"
        else
            s_prof="fail (exit $rc)"
            failed=1
            tail -n 8 "$log/profile.log"
        fi
    fi

    local mode
    for mode in eager compile; do
        echo "== PyTorch peer, $mode, mb $mb, $psteps steps"
        timeout -k 5 "$(cap 180)" python3 "$b/src/bench/peers/torch_gpt2_gpu.py" "$mode" \
            "$psteps" "$mb" </dev/null >"$log/torch_$mode.log" 2>&1
        rc=$?
        tail -n 2 "$log/torch_$mode.log"
        local t s
        t=$(tokens "$log/torch_$mode.log")
        if [ -n "$t" ]; then
            s=ok
        elif [ "$rc" -eq 77 ]; then
            s="n/a ($(sed -n 's/.*: \(no [^:]*\): skipped.*/\1/p' "$log/torch_$mode.log" | head -n 1))"
        else
            s="fail (exit $rc)"
            failed=1
        fi
        if [ "$mode" = eager ]; then t_eager=$t s_eager=$s; else t_comp=$t s_comp=$s; fi
    done

    echo
    echo "== summary ($(( $(date +%s) - T0 )) s)"
    local i
    printf '%-36s %s\n' test result
    for i in "${!names[@]}"; do
        printf '%-36s %s\n' "${names[$i]}" "${verdicts[$i]}"
    done
    echo
    python3 - "${PEAK_TFLOPS:-989}" "$mb" "$t_ds" "$s_ds" "$t_eager" "$s_eager" "$t_comp" \
        "$s_comp" "$t_noepi" "$s_noepi" <<'PY'
import sys
peak, mb, a = float(sys.argv[1]), sys.argv[2], sys.argv[3:]
L, C, T, V = 12, 768, 1024, 50257  # bench/gpt_gpu.sh's FLOP count per token
fpt = 6 * (12 * L * C * C + V * C) + 12 * L * T * C
ds = float(a[0]) if a[0] else None
print(f"{'GPT-2 124M bf16, mb ' + mb:<28} {'tokens/s':>12} {'MFU':>6}  dstrain / row")
for (label, t, s) in (("dstrain", a[0], a[1]), ("torch eager", a[2], a[3]),
                      ("torch.compile", a[4], a[5]), ("dstrain, epilogues off", a[6], a[7])):
    if not t:
        print(f"{label:<28} {s:>12}")
        continue
    mfu = 100 * float(t) * fpt / (peak * 1e12)
    ratio = f"{ds / float(t):.2f}x" if ds else "-"
    print(f"{label:<28} {float(t):12.0f} {mfu:5.1f}%  {ratio}")
print(f"(MFU against PEAK_TFLOPS={peak:g})")
PY
    # dstrain's GPU time per phase (CUDA events, the benchmark's whole run)
    grep -m1 "^dstrain: gpu ms per step" "$log/gpt_gpu.log" | sed 's/^dstrain: /dstrain /'
    echo "one-step profile (ncu): $s_prof"
    grep "^gpt_gpu profile: " "$log/profile.log" 2>/dev/null | sed -n '1,7p' |
        sed 's/^gpt_gpu profile: /  /'
    return "$failed"
}

case ${1:-} in
bundle) shift; bundle "$@" ;;
run) shift; run "$@" ;;
*) usage ;;
esac
