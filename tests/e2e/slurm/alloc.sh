#!/usr/bin/env bash
# dslaunch inside a real Slurm allocation with no hostfile (issue 16 item 1, the plan
# part): `--dry-run` under salloc and sbatch shows the allocation's nodes, in
# `scontrol show hostnames` order, with SLURM_TASKS_PER_NODE slots, and --include,
# --num_nodes and --hostfile act on it as on a hostfile.
# usage: with_slurm.sh 2 alloc.sh DSLAUNCH SOURCE_DIR
set -u
DSL=$1
SRC=$2
. "$SRC/tests/e2e/slurm/slurmlib.sh"

# summary FILE: "world N; host:slots ...; master M; from F" from a --dry-run JSON
summary() {
    python3 -c '
import json, sys
p = json.load(open(sys.argv[1]))
hosts = " ".join("%s:%s" % (h["host"], ",".join(map(str, h["slots"]))) for h in p["world_info"])
ranks = " ".join("%d@%s/%d/%d" % (r["rank"], r["host"], r["node_rank"], r["local_rank"]) for r in p["ranks"])
print("world %d; %s; master %s; ranks %s; from %s" % (p["world_size"], hosts, p["master_addr"], ranks, p["hosts_from"]))
' "$1"
}

# in_alloc SALLOC_ARGS... -- DSLAUNCH_ARGS...: dry-run inside salloc; the JSON in plan.json,
# the allocation's hosts by scontrol in hosts.txt and its job id in job.txt
in_alloc() {
    local a=()
    while [ "$1" != -- ]; do a+=("$1"); shift; done
    shift
    salloc "${a[@]}" sh -c '"$0" --dry-run "$@" >plan.json 2>dry.err; rc=$?
        scontrol show hostnames "$SLURM_JOB_NODELIST" >hosts.txt; echo "$SLURM_JOB_ID" >job.txt
        exit $rc' "$DSL" "$@" 2>salloc.err
}

expect_success "salloc -N2 --ntasks-per-node=2: 4 ranks on the allocation's 2 nodes" '
    in_alloc -N2 --ntasks-per-node=2 -- /bin/true || { cat dry.err salloc.err >&2; fail "dry run failed"; }
    job=$(cat job.txt)
    assert_eq "$(summary plan.json)" "world 4; n1:0,1 n2:0,1; master n1; ranks 0@n1/0/0 1@n1/0/1 2@n2/1/0 3@n2/1/1; from Slurm job $job: n[1-2], 4 slots"
    assert_eq "$(python3 -c "import json; print(\" \".join(h[\"host\"] for h in json.load(open(\"plan.json\"))[\"world_info\"]))")" \
        "$(echo $(cat hosts.txt))" "hosts against scontrol show hostnames"
    assert_grep "no --hostfile: the hosts are those of Slurm job $job" dry.err
    assert_slurm_clean
'

expect_success "salloc -N2 -n3: uneven slots (2 and 1)" '
    in_alloc -N2 -n3 -- /bin/true || { cat dry.err salloc.err >&2; fail "dry run failed"; }
    assert_eq "$(summary plan.json)" "world 3; n1:0,1 n2:0; master n1; ranks 0@n1/0/0 1@n1/0/1 2@n2/1/0; from Slurm job $(cat job.txt): n[1-2], 3 slots"
    assert_slurm_clean
'

expect_success "sbatch: a batch script sees the same plan" '
    printf "#!/bin/sh\nexec %s --dry-run /bin/true >%s/plan.json\n" "$DSL" "$PWD" >job.sh
    run_capture rc out err sbatch --wait -N2 --ntasks-per-node=2 -o "$PWD/batch.out" job.sh
    cat err batch.out >&2
    assert_eq "$rc" 0
    summary plan.json | grep -q "^world 4; n1:0,1 n2:0,1; master n1; .*from Slurm job [0-9]*: n\[1-2\], 4 slots$" ||
        fail "plan: $(summary plan.json)"
    assert_slurm_clean
'

expect_success "--include, --num_nodes and --hostfile act on the allocation" '
    in_alloc -N2 --ntasks-per-node=2 -- --include n2:1 /bin/true || { cat dry.err >&2; fail "include"; }
    summary plan.json | grep -q "^world 1; n2:1; master n2; ranks 0@n2/0/0; from Slurm job" ||
        fail "--include n2:1: $(summary plan.json)"
    in_alloc -N2 --ntasks-per-node=2 -- --num_nodes 1 /bin/true || { cat dry.err >&2; fail "num_nodes"; }
    summary plan.json | grep -q "^world 2; n1:0,1; master n1; " ||
        fail "--num_nodes 1: $(summary plan.json)"
    echo "localhost slots=3" >hf
    in_alloc -N2 --ntasks-per-node=2 -- --hostfile hf /bin/true || { cat dry.err >&2; fail "hostfile"; }
    assert_eq "$(summary plan.json)" "world 3; localhost:0,1,2; master 127.0.0.1; ranks 0@localhost/0/0 1@localhost/0/1 2@localhost/0/2; from hostfile '"'"'hf'"'"'"
    assert_not_grep "no --hostfile" dry.err
    assert_slurm_clean
'

expect_success "outside an allocation nothing changes: this machine" '
    DSLAUNCH_LOCAL_SLOTS=2 "$DSL" --dry-run /bin/true >plan.json
    assert_eq "$(summary plan.json)" "world 2; localhost:0,1; master 127.0.0.1; ranks 0@localhost/0/0 1@localhost/0/1; from this machine"
    assert_slurm_clean
'

done_testing
