# Sourced by the trainer tests that start ranks by hand under the env contract
# (ranks.sh, gpt.sh). Needs $TMP and $DSTRAIN; WORLD_ARGS (words) go before each run's
# own arguments, WORLD_TAG names the runs (DSLAUNCH_RUN_ID=$WORLD_TAG-NAME).
#
#   run_world N NAME ARGS...  N ranks on 127.0.0.1, rank r's output in
#                             $TMP/NAME.r.{out,err}, pids appended to $TMP/NAME.pids;
#                             returns the first non-zero exit status
#   train_ok N NAME ARGS...   the same, failing the test (with the outputs) unless it
#                             passes; one retry when the random port was taken
#   show NAME                 the tails of a run's outputs, on stderr
#   params_of FILE            figures rank 0 prints in its output FILE: the parameter
#   bytes_per_step FILE       count, the comm bytes sent per step
#   model_state FILE RANK     sets tot (model-state bytes), S (shard elements), B
#                             (bucket bytes) and gath (gathered bytes, stage 3) from
#                             that rank's memory line in FILE
#   resumed_equal CK "N NAME ARGS..." ...
#                             each run resumes $TMP/CK's global_step6 with
#                             RESUME_ARGS (words) and its ARGS, says so, and ends with
#                             the uninterrupted run's parameters ($TMP/p.full)

free_port() {
    # a random port below Linux's ephemeral range (32768-60999), where outgoing
    # connections cannot take it; a clash with another test fails the store's listen
    # loudly and train_ok retries once
    echo $(( 20000 + $(od -An -N2 -tu2 /dev/urandom) % 12000 ))
}

run_world() {
    n=$1 name=$2
    shift 2
    port=$(free_port)
    pids=""
    r=0
    while [ "$r" -lt "$n" ]; do
        # shellcheck disable=SC2086 # WORLD_ARGS are words
        RANK=$r WORLD_SIZE=$n LOCAL_RANK=$r LOCAL_WORLD_SIZE=$n MASTER_ADDR=127.0.0.1 \
            MASTER_PORT=$port DSLAUNCH_RUN_ID="${WORLD_TAG:-test}-$name" DSLAUNCH_RUN_TOKEN=secret \
            "$DSTRAIN" $WORLD_ARGS "$@" >"$TMP/$name.$r.out" 2>"$TMP/$name.$r.err" &
        pids="$pids $!"
        echo "$!" >>"$TMP/$name.pids"
        r=$((r + 1))
    done
    rc=0
    for p in $pids; do
        wait "$p" || { s=$?; [ "$rc" -eq 0 ] && rc=$s; }
    done
    return "$rc"
}

show() { for f in "$TMP/$1".*; do echo "== $f"; tail -n 20 "$f"; done >&2; }

train_ok() {
    n=$1 name=$2
    run_world "$@" && return 0
    if grep -qi "in use" "$TMP/$name".*.err 2>/dev/null; then
        rm -f "$TMP/$name.pids"
        run_world "$@" && return 0
    fi
    show "$name"
    fail "run '$name' at world $n failed"
}

params_of() { sed -n 's/.*model \([0-9]*\) params.*/\1/p' "$1"; }
bytes_per_step() { sed -n 's/.*bytes sent per step (rank 0): \([0-9]*\).*/\1/p' "$1"; }

model_state() {
    line=$(grep "rank $2 model-state bytes" "$1") || fail "no memory line for rank $2"
    tot=$(echo "$line" | sed 's/.*model-state bytes \([0-9]*\) .*/\1/')
    S=$(echo "$line" | sed 's/.*shard \([0-9]*\) elements.*/\1/')
    B=$(echo "$line" | sed 's/.*buckets \([0-9]*\) .*/\1/')
    gath=$(echo "$line" | sed -n 's/.* gathered \([0-9]*\);.*/\1/p')
}

# check_state OUT ST ESZ WHAT W0 W1 W2 W3: ranks 0 and 1 of the world-2 run OUT report
# the model-state bytes of stage ST's formula W<ST>, an arithmetic expression of P and
# model_state's S, B and gath; at stage 3 gath is two windows of the largest layer
# (256 x 256 + 256 = 65792 parameters) of ESZ-byte elements, prefetched. A failure
# starts with WHAT.
check_state() {
    case $2 in 0) formula=$5 ;; 1) formula=$6 ;; 2) formula=$7 ;; 3) formula=$8 ;; esac
    for r in 0 1; do
        model_state "$1" "$r"
        if [ "$2" = 3 ]; then
            [ "$gath" = $((2 * 65792 * $3)) ] || fail "${4}stage 3 rank $r: gathered '$gath'"
        fi
        want=$(($formula))
        [ "$tot" -eq "$want" ] || fail "${4}stage $2 rank $r: $tot bytes, formula $want"
    done
}

resumed_equal() {
    ck=$1
    shift
    for v in "$@"; do
        # shellcheck disable=SC2086 # a run's words
        set -- $v
        n=$1 tag=$2
        shift 2
        # shellcheck disable=SC2086 # RESUME_ARGS are words
        train_ok "$n" "$tag" $RESUME_ARGS "$@" --checkpoint-dir "$TMP/$ck" \
            --resume global_step6 --save-params "$TMP/p.$tag"
        grep -q "resumed from .* at step 6" "$TMP/$tag.0.out" ||
            fail "$ck resumed ($tag): no resume line"
        cmp -s "$TMP/p.full" "$TMP/p.$tag" || fail "$ck resumed ($tag) differs"
    done
}
