#!/bin/sh
# The rendezvous store against strangers, and the master port against a second job,
# with the real dslaunch and dstrain:
#   pairs      10 pairs of `dslaunch --include localhost:0,1 train` started at the same
#              instant all succeed (rank 0 serves on the port its agent reserved)
#   given      two jobs given the same --master_port at once: one runs, the other fails
#              before any rank starts, naming the port
#   handoff    rank 0 of dstrain gets the reserved socket (DSLAUNCH_STORE_FD), rank 1 not
#   flood      4,200 idle connections before rank 1 joins and during training:
#              the job finishes
#   ulimit     600 connections with rank 0 under `ulimit -n 256`, with checkpoints: the
#              store keeps at most a quarter of its fds for strangers, so the job is
#              served, checkpoints are written, no busy loop (the store's counters).
#              accept() failing with EMFILE itself is reproduced in tests/comm/store_test.c
#   token      a multi-rank dstrain without DSLAUNCH_RUN_TOKEN refuses to start unless
#              DSLAUNCH_STORE_INSECURE=1
#   loopback   a job on this machine alone listens on loopback only: every TCP bind of
#              dslaunch, its agent and both ranks (the port probe, the store, the
#              collectives' listeners), seen by strace, is to 127.0.0.1
#
#   store.sh <dslaunch> <dstrain> <test>       exit 0 pass, 1 fail, 77 skip
set -u
DSL=$1
DSTRAIN=$2
TEST=$3
TMP=$(mktemp -d "${TMPDIR:-/tmp}/dstrain-store.XXXXXX")
FLOOD_PID=
cleanup() {
    [ -n "$FLOOD_PID" ] && kill "$FLOOD_PID" 2>/dev/null
    rm -rf "$TMP"
}
trap cleanup EXIT
export OMP_NUM_THREADS=1 DSLAUNCH_COMM_TIMEOUT=${DSLAUNCH_COMM_TIMEOUT:-60}
export DSLAUNCH_STORE_TIMEOUT=${DSLAUNCH_STORE_TIMEOUT:-60}
unset CUDA_VISIBLE_DEVICES DSLAUNCH_RUN_TOKEN DSLAUNCH_STORE_INSECURE

fail() { echo "FAIL: $*" >&2; exit 1; }
skip() { echo "SKIP: $*" >&2; exit 77; }
show() { for f in "$@"; do echo "== $f"; tail -n 20 "$f"; done >&2; }
[ -x "$DSL" ] && [ -x "$DSTRAIN" ] || skip "no dslaunch or dstrain"
command -v python3 >/dev/null || skip "no python3"

TINY="--backend tcp --data synthetic --synthetic-train 512 --synthetic-test 128
      --synthetic-dim 24 --hidden 32,16 --train-batch 32 --micro-batch 8 --steps 12
      --steps-per-print 0 --eval-interval 0 --lr 0.01"

free_port() { echo $(( 20000 + $(od -An -N2 -tu2 /dev/urandom) % 12000 )); }

# wait_listen PORT: until something listens on 127.0.0.1:PORT (60 s at most)
wait_listen() {
    python3 - "$1" <<'PY' || fail "nothing listens on port $1"
import socket, sys, time
for i in range(600):
    try:
        socket.create_connection(("127.0.0.1", int(sys.argv[1])), 1).close()
        sys.exit(0)
    except OSError:
        time.sleep(0.1)
sys.exit(1)
PY
}

# flood PORT N READY: hold up to N idle connections to PORT (opened as fast as the
# store takes them) until killed; writes how many it opened to READY
flood() {
    python3 - "$1" "$2" "$3" <<'PY' &
import resource, socket, sys, time
port, n, ready = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
want = n + 64 if hard == resource.RLIM_INFINITY else min(n + 64, hard)
try:
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, want), hard))
except (ValueError, OSError):
    pass
held = []
for i in range(n):
    try:
        s = socket.socket()
        s.settimeout(0.5)
        s.connect(("127.0.0.1", port))
        held.append(s)
    except OSError:
        pass
open(ready + ".tmp", "w").write(str(len(held)))
import os
os.rename(ready + ".tmp", ready)
time.sleep(600)
PY
    FLOOD_PID=$!
}

wait_file() {
    i=0
    while [ ! -e "$1" ]; do
        i=$((i + 1))
        [ "$i" -le 1200 ] || fail "no $1 after 120 s"
        sleep 0.1
    done
}

# rank R N PORT NAME ARGS...: one dstrain rank started by hand, in the background
rank() {
    r=$1 n=$2 port=$3 name=$4
    shift 4
    RANK=$r WORLD_SIZE=$n LOCAL_RANK=$r LOCAL_WORLD_SIZE=$n MASTER_ADDR=127.0.0.1 \
        MASTER_PORT=$port DSLAUNCH_RUN_ID="store-$name" DSLAUNCH_RUN_TOKEN=sekrit \
        "$DSTRAIN" "$@" >"$TMP/$name.$r.out" 2>"$TMP/$name.$r.err" &
}

case "$TEST" in
pairs)
    i=1
    while [ "$i" -le 10 ]; do
        "$DSL" --include localhost:0,1 train $TINY >"$TMP/a$i.out" 2>"$TMP/a$i.err" &
        a=$!
        "$DSL" --include localhost:0,1 train $TINY >"$TMP/b$i.out" 2>"$TMP/b$i.err" &
        b=$!
        wait "$a" || { show "$TMP/a$i.err"; fail "pair $i: the first job exited $?"; }
        wait "$b" || { show "$TMP/b$i.err"; fail "pair $i: the second job exited $?"; }
        for j in a b; do
            grep -q "^\[rank 0\] summary: steps 12" "$TMP/$j$i.out" ||
                { show "$TMP/$j$i.out"; fail "pair $i: job $j did not train"; }
        done
        i=$((i + 1))
    done
    ;;
given)
    port=$(free_port)
    i=1
    while [ "$i" -le 5 ]; do
        "$DSL" --master_port "$port" --include localhost:0,1 train $TINY \
            >"$TMP/a.out" 2>"$TMP/a.err" &
        a=$!
        "$DSL" --master_port "$port" --include localhost:0,1 train $TINY \
            >"$TMP/b.out" 2>"$TMP/b.err" &
        b=$!
        wait "$a"; ra=$?
        wait "$b"; rb=$?
        for j in a b; do
            eval "rc=\$r$j"
            if [ "$rc" -eq 0 ]; then
                grep -q "^\[rank 0\] summary: steps 12" "$TMP/$j.out" ||
                    { show "$TMP/$j.out"; fail "round $i: job $j exited 0 without training"; }
            else
                # the loser fails clearly, before any rank started
                grep -q "master port $port is busy" "$TMP/$j.err" ||
                    { show "$TMP/$j.err"; fail "round $i: job $j exited $rc without naming the port"; }
                grep -q "^\[rank" "$TMP/$j.out" "$TMP/$j.err" &&
                    { show "$TMP/$j.out" "$TMP/$j.err"; fail "round $i: job $j started ranks"; }
                grep -q "Address already in use" "$TMP/$j.err" &&
                    { show "$TMP/$j.err"; fail "round $i: a rank lost the port race"; }
            fi
        done
        if [ "$ra" -ne 0 ] && [ "$rb" -ne 0 ]; then
            # both refused, naming the port: something else on this machine (another
            # test's job) holds it; that round says nothing, so take another port
            tries=$((${tries:-0} + 1))
            [ "$tries" -lt 5 ] || { show "$TMP/a.err" "$TMP/b.err"; fail "round $i: both jobs failed $tries times"; }
            port=$(free_port)
            continue
        fi
        i=$((i + 1))
    done
    ;;
handoff)
    # a "dstrain" that reports what it inherited
    mkdir -p "$TMP/bin"
    cat >"$TMP/bin/dstrain" <<'SH'
#!/bin/sh
if [ -n "${DSLAUNCH_STORE_FD:-}" ]; then
    echo "fd=$DSLAUNCH_STORE_FD $(readlink /proc/$$/fd/$DSLAUNCH_STORE_FD) port=$MASTER_PORT"
    python3 -c "
import socket, sys
s = socket.socket(fileno=int(sys.argv[1]))
print('listening' if s.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN) else 'not listening',
      s.getsockname()[0], s.getsockname()[1])
s.detach()" "$DSLAUNCH_STORE_FD"
else
    echo "no store fd"
fi
SH
    chmod +x "$TMP/bin/dstrain"
    "$DSL" --include localhost:0,1 "$TMP/bin/dstrain" >"$TMP/h.out" 2>"$TMP/h.err" ||
        { show "$TMP/h.err"; fail "the job failed"; }
    port=$(sed -n 's/^\[rank 0\] fd=[0-9]* socket:\[[0-9]*\] port=\([0-9]*\)$/\1/p' "$TMP/h.out")
    [ -n "$port" ] || { show "$TMP/h.out"; fail "rank 0 got no socket"; }
    grep -q "^\[rank 0\] listening 127.0.0.1 $port$" "$TMP/h.out" ||
        { show "$TMP/h.out"; fail "rank 0's socket does not listen on 127.0.0.1:$port"; }
    grep -q "^\[rank 1\] no store fd$" "$TMP/h.out" || { show "$TMP/h.out"; fail "rank 1 got a store fd"; }
    # any other program binds the port itself: it gets no socket
    "$DSL" --include localhost:0,1 sh -c 'echo "fd=${DSLAUNCH_STORE_FD:-none}"' \
        >"$TMP/o.out" 2>"$TMP/o.err" || { show "$TMP/o.err"; fail "the sh job failed"; }
    [ "$(grep -c '^\[rank [01]\] fd=none$' "$TMP/o.out")" -eq 2 ] ||
        { show "$TMP/o.out"; fail "a foreign program got a store fd"; }
    ;;
flood|ulimit)
    port=$(free_port)
    lim=""
    extra=""
    n=4200
    if [ "$TEST" = ulimit ]; then
        lim="ulimit -n 256;"
        n=600
        extra="--save-interval 4 --checkpoint-dir $TMP/ck"
    fi
    # rank 0 first, alone; the flood; then rank 1; the flood goes on during training
    RANK=0 WORLD_SIZE=2 LOCAL_RANK=0 LOCAL_WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 \
        MASTER_PORT=$port DSLAUNCH_RUN_ID=store-f DSLAUNCH_RUN_TOKEN=sekrit \
        DSLAUNCH_STORE_DEBUG=1 sh -c "$lim exec \"\$0\" \"\$@\"" "$DSTRAIN" $TINY --steps 40 $extra \
        >"$TMP/f.0.out" 2>"$TMP/f.0.err" &
    p0=$!
    wait_listen "$port"
    flood "$port" "$n" "$TMP/opened"
    wait_file "$TMP/opened"
    rank 1 2 "$port" f $TINY --steps 40 $extra
    p1=$!
    wait "$p1"; r1=$?
    wait "$p0"; r0=$?
    [ "$r0" -eq 0 ] && [ "$r1" -eq 0 ] ||
        { show "$TMP/f.0.err" "$TMP/f.1.err"; fail "ranks exited $r0 and $r1 under a flood of $(cat "$TMP/opened") connections"; }
    grep -q "summary: steps 40" "$TMP/f.0.out" || { show "$TMP/f.0.out"; fail "rank 0 did not train"; }
    [ "$(cat "$TMP/opened")" -ge 500 ] || fail "the flood opened only $(cat "$TMP/opened") connections"
    stats=$(grep "store: stats:" "$TMP/f.0.err") || { show "$TMP/f.0.err"; fail "no store counters"; }
    echo "$stats"
    idle=$(echo "$stats" | sed 's/.*(idle \([0-9]*\)).*/\1/')
    backoffs=$(echo "$stats" | sed 's/.*backoffs \([0-9]*\),.*/\1/')
    dropped=$(echo "$stats" | sed 's/.*unauthenticated dropped \([0-9]*\),.*/\1/')
    # the strangers were let go, not served: dropped for room or at their hello deadline
    [ "$dropped" -gt 0 ] || fail "no unauthenticated connection was dropped: $stats"
    # no busy loop: a wake-up with nothing to do only where the listener then rested
    [ "$idle" -le $((backoffs + 8)) ] || fail "the store spun: $stats"
    if [ "$TEST" = ulimit ]; then
        [ -e "$TMP/ck/latest" ] || fail "no checkpoint was written"
        grep -q "Too many open files" "$TMP/f.0.err" "$TMP/f.1.err" && fail "a rank ran out of fds"
    fi
    ;;
token)
    port=$(free_port)
    RANK=0 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port DSLAUNCH_RUN_ID=t \
        "$DSTRAIN" $TINY >"$TMP/t.out" 2>"$TMP/t.err"
    rc=$?
    [ "$rc" -ne 0 ] || fail "rank 0 ran an open store"
    grep -q "DSLAUNCH_RUN_TOKEN is not set" "$TMP/t.err" || { show "$TMP/t.err"; fail "no reason given"; }
    grep -q "DSLAUNCH_STORE_INSECURE=1" "$TMP/t.err" || { show "$TMP/t.err"; fail "no way out given"; }
    # asked for explicitly, an open store works
    pids=""
    for r in 0 1; do
        RANK=$r WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port DSLAUNCH_RUN_ID=t \
            DSLAUNCH_STORE_INSECURE=1 "$DSTRAIN" $TINY >"$TMP/i.$r.out" 2>"$TMP/i.$r.err" &
        pids="$pids $!"
    done
    for p in $pids; do
        wait "$p" || { show "$TMP/i.0.err" "$TMP/i.1.err"; fail "the insecure job failed"; }
    done
    grep -q "summary: steps 12" "$TMP/i.0.out" || { show "$TMP/i.0.out"; fail "no training"; }
    ;;
loopback)
    command -v strace >/dev/null || skip "no strace (scripts/setup.sh installs it)"
    # LeakSanitizer cannot run under ptrace: an ASan build checks leaks everywhere else
    ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0" strace -f -qq -e trace=bind -o "$TMP/binds" "$DSL" --include localhost:0,1 train $TINY \
        >"$TMP/l.out" 2>"$TMP/l.err" || { show "$TMP/l.err"; fail "the job failed"; }
    grep -q "^\[rank 0\] summary: steps 12" "$TMP/l.out" || { show "$TMP/l.out"; fail "no training"; }
    grep "sa_family=AF_INET" "$TMP/binds" >"$TMP/inet" || true
    # the probe, the store and two collective listeners at least: not a vacuous pass
    [ "$(grep -c 'inet_addr("127.0.0.1")' "$TMP/inet")" -ge 4 ] ||
        { show "$TMP/inet"; fail "fewer TCP binds than the job makes"; }
    if grep -v 'inet_addr("127.0.0.1")' "$TMP/inet" >"$TMP/other"; then
        show "$TMP/other"
        fail "a job on this machine alone bound another address"
    fi
    ;;
*)
    fail "unknown test '$TEST'"
    ;;
esac
exit 0
