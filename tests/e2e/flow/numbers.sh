#!/usr/bin/env bash
# Flow tests of bad numbers and hostile text on the real command lines (dslaunch and
# dstrain): each is refused before anything starts, with exit code 2 and a message that
# names the option or key, gives the allowed range and quotes the input escaped.
# usage: numbers.sh DSLAUNCH DSTRAIN SOURCE_DIR
set -u
DSL=$1
DSTRAIN=$2
SRC=$3
. "$SRC/tests/e2e/flow/lib.sh"
export DSLAUNCH_LOCAL_SLOTS=2
unset CUDA_VISIBLE_DEVICES OMP_NUM_THREADS
cd "$T_TMP"
ESC=$(printf '\033')

# refused DESCRIPTION-GREP ARGS...: dslaunch ARGS touch ran: exit 2, message, nothing ran
refused() {
    local want=$1
    shift
    rm -f ran
    run_capture rc out err "$DSL" "$@" sh -c "touch ran"
    assert_eq "$rc" 2 "exit code of dslaunch $*"
    assert_grep "$want" err
    [ ! -e ran ] || fail "dslaunch $* started the program"
}

expect_success "--keepalive 0.2 and 1e308 are refused with the allowed range, nothing starts" '
    refused "option .--keepalive. is out of range: allowed 2..3600 seconds, got .0\.2.$" \
        --keepalive 0.2 --include localhost:0
    refused "option .--keepalive. is out of range: allowed 2..3600 seconds, got .1e308.$" \
        --keepalive 1e308 --include localhost:0
    # the bounds themselves are fine
    run_capture rc out err "$DSL" --keepalive 2 --connect-timeout 1h --include localhost:0 true
    assert_eq "$rc" 0
'

expect_success "every duration and size option says its range, with the text as typed" '
    refused "option .--term_timeout. is out of range: allowed 0..3600 seconds, got .1e308.$" \
        --term-timeout 1e308
    refused "option .--connect_timeout. is out of range: allowed 1..3600 seconds, got .0.$" \
        --connect-timeout 0
    refused "option .--job_timeout. is out of range: allowed 0..31622400 seconds, got .-5.$" \
        --job-timeout -5
    refused "option .--hang_timeout. needs a duration in seconds" --hang-timeout nan
    refused "option .--output_buffer. is out of range: allowed 64K..64G bytes, got .1T.$" \
        --output-buffer 1T
    refused "option .--rank_memory_limit. is out of range: allowed 16M..1P bytes" \
        --rank-memory-limit 99999999999999999999K
'

expect_success "an overflowing integer is out of range as typed, never a wrapped number" '
    refused "option .--fanout. is out of range: allowed 1..16777216, got .9223372036854775808.$" \
        --fanout 9223372036854775808
    refused "option .--max_restarts. is out of range: allowed 0..1000, got .-9223372036854775809.$" \
        --max-restarts -9223372036854775809
    refused "option .--master_port. is out of range: allowed 1..65535, got .99999999999999999999.$" \
        --master-port 99999999999999999999
    assert_not_grep "at least" err
    export DSLAUNCH_LOCAL_SLOTS=99999999999999999999
    refused "DSLAUNCH_LOCAL_SLOTS out of range: allowed 1..4096, got .99999999999999999999.$"
'

expect_success "--help shows the range of every bounded option" '
    run_capture rc out err "$DSL" --help
    assert_eq "$rc" 0
    assert_grep "^ *--keepalive SECONDS .*(allowed 2..3600 s, default: 15)$" out
    assert_grep "^ *--output-buffer SIZE .*(allowed 64K..64G, default: 64M)$" out
    assert_grep "^ *--fanout N .*(allowed 1..16777216, default: 256)$" out
'

expect_success "dsbench: --help shows the step factor's range; a factor or DSLAUNCH_COMM_TIMEOUT outside its range is refused (2)" '
    BENCH=$(dirname "$DSL")/dsbench
    [ -x "$BENCH" ] || fail "dsbench is not built beside dslaunch"
    run_capture rc out err "$BENCH" --help
    assert_eq "$rc" 0
    assert_grep "^ *-f, --stepfactor N .*(allowed 2..1024, default: 4)$" out
    run_capture rc out err "$BENCH" -f 1
    assert_eq "$rc" 2
    assert_grep "option .--stepfactor. is out of range: allowed 2..1024, got .1.$" err
    # a numeric environment variable out of its range is a usage error too, as in dstrain
    run_capture rc out err env DSLAUNCH_COMM_TIMEOUT=0 "$BENCH" -b 1K -e 1K
    assert_eq "$rc" 2 "exit code of dsbench with DSLAUNCH_COMM_TIMEOUT=0"
    assert_grep "bad DSLAUNCH_COMM_TIMEOUT: allowed a duration over 0 and up to 604800 seconds, got .0.$" err
    # a backend this build lacks is a usage error as well (a build with CUDA runs it,
    # or fails to start it without a GPU)
    run_capture rc out err env RANK=0 WORLD_SIZE=1 MASTER_ADDR=127.0.0.1 MASTER_PORT=1 \
        "$BENCH" --backend nccl -b 1K -e 1K
    if grep -q "not built in" err; then
        assert_eq "$rc" 2 "exit code of dsbench --backend nccl without CUDA"
    fi
'

expect_success "--include and --exclude with an empty value are errors, not every host" '
    refused "--include .. is empty" --include ""
    refused "--exclude .. is empty" --exclude ""
    refused "--include .. is empty" --include=
'

expect_success "hostfile errors show control characters escaped, never raw" '
    printf "localhost slots=1\nw${ESC}[31mred${ESC}]0;title\a slots=1\n" > esc.txt
    refused "esc.txt.:2: bad host range .w\\\\x1b\[31mred\\\\x1b\]0;title\\\\x07." --hostfile esc.txt
    if grep -q "$ESC" err; then fail "an escape character reached stderr"; fi
    printf "localhost slots=1\nw slots=1\tbad\n" > tab.txt
    refused "tab.txt.:2: unexpected text .bad." --hostfile tab.txt
    printf "localhost slots=1\nw slots=1${ESC}[2J\n" > cls.txt
    refused "cls.txt.:2: bad slot count .1\\\\x1b\[2J." --hostfile cls.txt
    if grep -q "$ESC" err; then fail "an escape character reached stderr"; fi
    # the offending text in an option value too
    refused "bad host range .w\\\\x1b\[2J" --include "w${ESC}[2J"
    if grep -q "$ESC" err; then fail "an escape character reached stderr"; fi
'

expect_success "a hostfile that starts with a UTF-8 byte order mark works" '
    printf "\357\273\277localhost slots=2\n" > bom.txt
    run_capture rc out err "$DSL" --hostfile bom.txt sh -c "echo rank \$RANK"
    assert_eq "$rc" 0 "exit code"
    assert_grep "^\[rank 1\] rank 1$" out
'

expect_success "dstrain: gradient_accumulation_steps 1e9 is a config error (2), not SIGABRT" '
    printf "{\"train_micro_batch_size_per_gpu\": 4,\n \"gradient_accumulation_steps\": 1e9}\n" > accum.json
    run_capture rc out err "$DSTRAIN" --config accum.json --data synthetic --steps 1
    assert_eq "$rc" 2 "exit code"
    assert_grep "accum.json:2:2: .gradient_accumulation_steps. out of range: allowed 1..16777216, got .1e9.$" err
    # and through the launcher: the rank exits 2, and so does the job
    run_capture rc out err "$DSL" --include localhost:0 train --config accum.json --data synthetic --steps 1
    assert_eq "$rc" 2 "exit code under dslaunch"
    assert_grep "gradient_accumulation_steps. out of range: allowed 1..16777216, got .1e9." err
'

expect_success "dstrain: huge, negative, fractional and overflowing values name the key and range" '
    run_capture rc out err "$DSTRAIN" --steps 9223372036854775808 --micro-batch 4
    assert_eq "$rc" 2
    assert_grep "command line: .dstrain.steps. out of range: allowed 0..9007199254740992, got .9223372036854775808.$" err
    run_capture rc out err "$DSTRAIN" --micro-batch 1.5
    assert_eq "$rc" 2
    assert_grep "expected an integer from 1 to 16777216 for .train_micro_batch_size_per_gpu., got .1\.5.$" err
    run_capture rc out err "$DSTRAIN" --lr -1 --micro-batch 4
    assert_eq "$rc" 2
    assert_grep "optimizer.params.lr. out of range: allowed 0..1000000, got .-1.$" err
    run_capture rc out err "$DSTRAIN" --micro-batch 8192 --grad-accum 4096 --data synthetic
    assert_eq "$rc" 2
    assert_grep "global batch out of range: .* = 33554432 samples per step, allowed 1..16777216$" err
    printf "{\"train_batch_size\": 8, \"seed\": -1}" > seed.json
    run_capture rc out err "$DSTRAIN" --config seed.json
    assert_eq "$rc" 2
    assert_grep "seed.json:1:25: .seed. out of range: allowed 0..9007199254740992, got .-1.$" err
    run_capture rc out err "$DSTRAIN" --local_rank 99999999999999999999
    assert_eq "$rc" 2
    assert_grep "option .--local_rank. is out of range: allowed 0..1048576" err
'

expect_success "dstrain: synthetic data too large for memory is an error naming the sizes" '
    # under ASan, a failed huge malloc returns NULL as libc does instead of aborting
    run_capture rc out err env ASAN_OPTIONS="${ASAN_OPTIONS:-}:allocator_may_return_null=1" \
        "$DSTRAIN" --micro-batch 1 --data synthetic --steps 1 \
        --synthetic-train 1000000000 --synthetic-dim 10000000
    assert_eq "$rc" 1 "exit code (not 134)"
    assert_grep "synthetic data: cannot allocate 40000004000000000 bytes for 1000000000 training samples of 10000000 features" err
'

expect_success "dstrain: an idx file whose header claims more than it holds is refused by name" '
    mkdir -p fm
    # a labels file claiming 2^31-1 labels with 4 bytes of data, beside real-looking images
    printf "\0\0\10\1\177\377\377\377abcd" > fm/train-labels-idx1-ubyte.gz
    printf "\0\0\10\3\0\0\0\1\0\0\0\1\0\0\0\1x" > fm/train-images-idx3-ubyte.gz
    run_capture rc out err "$DSTRAIN" --micro-batch 1 --steps 1 --data-path fm
    assert_eq "$rc" 1 "exit code"
    assert_grep "fm/train-labels-idx1-ubyte.gz.: the idx header claims 2147483647 bytes of data, the file holds 4$" err
'

expect_success "dstrain: more compute threads than CPUs is run, with a warning that names the counts" '
    n=$(getconf _NPROCESSORS_ONLN)
    run_capture rc out err env RANK=0 WORLD_SIZE=1 "$DSTRAIN" --data synthetic \
        --synthetic-train 64 --synthetic-test 64 --micro-batch 64 --steps 1 --threads $((n + 1))
    assert_eq "$rc" 0
    assert_grep "warning: $((n + 1)) compute threads per rank x 1 local rank on $n CPUs\?: the threads take turns" err
    # one rank of two on this node with a fair share: no warning; the other local ranks
    # never print it (local rank 0 speaks for the node)
    run_capture rc out err env RANK=0 WORLD_SIZE=1 LOCAL_WORLD_SIZE=2 "$DSTRAIN" \
        --data synthetic --synthetic-train 64 --synthetic-test 64 --micro-batch 64 --steps 1
    assert_eq "$rc" 0
    assert_not_grep "take turns" err
    run_capture rc out err env RANK=0 WORLD_SIZE=1 LOCAL_RANK=1 "$DSTRAIN" --data synthetic \
        --synthetic-train 64 --synthetic-test 64 --micro-batch 64 --steps 1 --threads $((n + 1))
    assert_eq "$rc" 0
    assert_not_grep "take turns" err
'

done_testing
