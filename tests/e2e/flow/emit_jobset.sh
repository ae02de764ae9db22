#!/usr/bin/env bash
# Flow tier: `dslaunch --dry-run --emit jobset` (docs/no-ssh.md, "A JobSet from a
# command line"). A YAML reader (python3-yaml) parses the manifest: the JobSet's shape,
# every word of a nasty command line read back as Kubernetes would pass it ($$ -> $),
# the secret only by reference; then the pods' command, as the manifest has it, runs as
# a two-node no-ssh job on this machine (node 0's address replaced by 127.0.0.1).
# usage: emit_jobset.sh DSLAUNCH WORKER SOURCE_DIR
set -u
DSL=$1
W=$2
SRC=$3
. "$SRC/tests/e2e/flow/lib.sh"
export DSLAUNCH_JOB_SECRET=flow-emit-jobset-secret-value-0123
PORT=29760
NL='
'

expect_success "the manifest parses as YAML and carries every word byte for byte" '
    python3 -c "import yaml" 2>/dev/null || skip "no python3-yaml"
    cd "$T_TMP"
    export FLOW_X="\$(X) \$\$ \"v\""
    run_capture rc out err "$DSL" --dry-run --emit jobset=job.yaml --image "reg.example/t:v1" \
        --num_nodes 3 --num_gpus 2 --master_port $PORT --max-restarts 1 --export FLOW_X \
        "$W" --lr "\$(HOME) \"q\" \\x" "a${NL}b	c" "# no comment" "yes" "caf$(printf "\303\251")"
    cat err
    assert_eq "$rc" 0
    [ ! -s out ] || fail "the manifest went to stdout too"
    ! grep -q "$DSLAUNCH_JOB_SECRET" job.yaml || fail "the secret is in the manifest"
    python3 - "$W" "$PORT" <<"PY"
import sys, yaml
w, port = sys.argv[1], sys.argv[2]
d = yaml.safe_load(open("job.yaml"))
assert d["apiVersion"] == "jobset.x-k8s.io/v1alpha2" and d["kind"] == "JobSet", d
name = d["metadata"]["name"]
assert name == w.rsplit("/", 1)[-1].replace("_", "-"), name
assert d["spec"]["network"]["enableDNSHostnames"] is True
assert d["spec"]["network"]["subdomain"] == name
rj = d["spec"]["replicatedJobs"]
assert len(rj) == 1 and rj[0]["name"] == "node" and rj[0]["replicas"] == 1, rj
job = rj[0]["template"]["spec"]
assert job["parallelism"] == 3 and job["completions"] == 3, job
assert job["completionMode"] == "Indexed"
pod = job["template"]["spec"]
assert pod["restartPolicy"] == "Never"
c = pod["containers"][0]
assert c["image"] == "reg.example/t:v1"
# Kubernetes reads $$ as $ and expands $(VAR) in a command
cmd = [a.replace("$$", "\0").replace("$(JOB_COMPLETION_INDEX)", "K").replace("\0", "$")
       for a in c["command"]]
want = ["dslaunch", "--node_rank", "K", "--nnodes", "3",
        "--master_addr", name + "-node-0-0." + name, "--master_port", port,
        "--nproc_per_node", "2", "--max-restarts", "1", "--export", "FLOW_X", "--",
        w, "--lr", "$(HOME) \"q\" \\x", "a\nb\tc", "# no comment", "yes", "caf\u00e9"]
assert cmd == want, (cmd, want)
env = {e["name"]: e for e in c["env"]}
ref = env["DSLAUNCH_JOB_SECRET"]["valueFrom"]["secretKeyRef"]
assert ref == {"name": name + "-secret", "key": "secret"}, ref
assert "value" not in env["DSLAUNCH_JOB_SECRET"]
assert env["FLOW_X"]["value"].replace("$$", "$") == "$(X) $$ \"v\"", env["FLOW_X"]
assert [p["containerPort"] for p in c["ports"]] == [int(port), int(port) + 1]
assert c["resources"]["limits"]["nvidia.com/gpu"] == 2
PY
'

expect_success "GPUs only for a GPU job: not for --nproc_per_node, nor with CUDA_VISIBLE_DEVICES=-1" '
    python3 -c "import yaml" 2>/dev/null || skip "no python3-yaml"
    cd "$T_TMP"
    for how in "CUDA_VISIBLE_DEVICES=-1 --num_gpus" "CUDA_VISIBLE_DEVICES=0 --nproc_per_node"; do
        set -- $how
        rm -f cpu.yaml
        run_capture rc out err env "$1" "$DSL" --dry-run --emit jobset=cpu.yaml --image i \
            --num_nodes 2 "$2" 3 "$W" env
        assert_eq "$rc" 0 "$how"
        python3 - <<"PY"
import yaml
d = yaml.safe_load(open("cpu.yaml"))
c = d["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["containers"][0]
assert "resources" not in c, c.get("resources")
i = c["command"].index("--nproc_per_node")
assert c["command"][i + 1] == "3", c["command"]
PY
        [ $? = 0 ] || fail "$how: the pods ask for GPUs"
        assert_grep "^# .*no nvidia.com/gpu is asked for" cpu.yaml
    done
'

expect_success "without --image, with --nnodes, or onto an existing file: refused" '
    cd "$T_TMP"
    run_capture rc out err "$DSL" --dry-run --emit jobset "$W" env
    assert_eq "$rc" 2
    assert_grep "--emit jobset needs --image IMAGE" err
    run_capture rc out err "$DSL" --dry-run --emit jobset --image i --nnodes 2 "$W" env
    assert_eq "$rc" 2
    assert_grep "give the node count with --num_nodes" err
    echo keep >old.yaml
    run_capture rc out err "$DSL" --dry-run --emit jobset=old.yaml --image i "$W" env
    assert_eq "$rc" 2
    assert_eq "$(cat old.yaml)" keep
'

expect_success "the pods command runs as a two-node no-ssh job (node 0 at 127.0.0.1)" '
    python3 -c "import yaml" 2>/dev/null || skip "no python3-yaml"
    cd "$T_TMP"
    "$DSL" --dry-run --emit jobset=run.yaml --image i --num_nodes 2 --nproc_per_node 1 \
        --master_port $((PORT + 10)) "$W" env >/dev/null
    # each pod: the command with $(JOB_COMPLETION_INDEX) set and node 0 on loopback,
    # NUL-separated for xargs; the first word (dslaunch) becomes this build
    for k in 0 1; do
        python3 - "$k" <<"PY" >cmd.$k
import sys, yaml
k = sys.argv[1]
d = yaml.safe_load(open("run.yaml"))
c = d["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["containers"][0]
a = [w.replace("$$", "\0").replace("$(JOB_COMPLETION_INDEX)", k).replace("\0", "$")
     for w in c["command"]]
i = a.index("--master_addr")
a[i + 1] = "127.0.0.1"
sys.stdout.write("\0".join(a[1:]) + "\0")
PY
    done
    xargs -0 "$DSL" <cmd.1 >out1 2>err1 &
    p1=$!
    run_capture rc out0 err0 xargs -0 "$DSL" <cmd.0
    rc1=0; wait $p1 || rc1=$?
    cat err0 err1
    assert_eq "$rc" 0 "node 0"
    assert_eq "$rc1" 0 "node 1"
    assert_grep "rank 0\] RANK=0$" out0
    assert_grep "rank 1\] RANK=1$" out0
    [ $(grep -c "\] WORLD_SIZE=2$" out0) = 2 ]
'

done_testing
