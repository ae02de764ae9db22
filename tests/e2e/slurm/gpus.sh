#!/usr/bin/env bash
# GPUs under Slurm (issue 16; run under DSL_SLURM_GPUS=4 with_slurm.sh 2: nodes n1 and
# n2 with 4 gres "GPUs" each, device nodes no program opens, so Slurm allocates them
# and sets SLURM_*GPUS* and CUDA_VISIBLE_DEVICES exactly as on a GPU node). The slots
# come from how the job asked (--gpus-per-node, --gres=gpu:N, --gpus, --num_gpus) and
# every rank gets the GPUs Slurm gave the job on its node, not the plan's bare numbers:
# a job that starts while another holds GPUs 0 and 1 has its ranks on 2 and 3.
# usage: DSL_SLURM_GPUS=4 with_slurm.sh 2 gpus.sh DSLAUNCH SOURCE_DIR
set -u
DSL=$1
SRC=$2
. "$SRC/tests/e2e/slurm/slurmlib.sh"
unset SLURM_GPUS_PER_NODE SLURM_GPUS SLURM_GPUS_ON_NODE
[ "$(scontrol show node n1 | grep -o 'Gres=gpu:[0-9]*')" = Gres=gpu:4 ] ||
    { echo "not a cluster with 4 GPUs a node (DSL_SLURM_GPUS=4)" >&2; exit 1; }

cat >envp.sh <<'EOS'
#!/bin/sh
echo "R rank=$RANK local=$LOCAL_RANK world=$WORLD_SIZE host=$(hostname) cvd=$CUDA_VISIBLE_DEVICES"
EOS
chmod +x envp.sh
# ranks FILE: the "R ..." lines, sorted by rank
ranks() { grep -o 'R rank=.*' "$1" | sort -t= -k2 -n; }

expect_success "--gpus-per-node=2 while another job holds GPUs 0,1: 4 ranks, each node's on GPUs 2,3" '
    run_capture rc out err salloc -N2 --gpus-per-node=2 sh -c \
        "salloc -N2 --gpus-per-node=2 \"$DSL\" ./envp.sh"
    cat err >&2
    assert_eq "$rc" 0 "exit"
    ranks out >r
    cat r >&2
    assert_eq "$(wc -l <r)" 4 "ranks"
    assert_eq "$(grep -c "world=4 host=n[12] cvd=2,3$" r)" 4 "ranks on GPUs 2,3"
    assert_grep "rank=1 local=1 world=4 host=n1 cvd=2,3" r
    assert_grep "rank=2 local=0 world=4 host=n2 cvd=2,3" r
    assert_slurm_clean
'

expect_success "sbatch --gres=gpu:2 (SLURM_GPUS_ON_NODE): 2 ranks a node on GPUs 0,1" '
    printf "#!/bin/sh\nexec %s ./envp.sh\n" "$DSL" >job.sh
    run_capture rc out err sbatch --wait -N2 --gres=gpu:2 -o "$PWD/job.out" job.sh
    cat job.out >&2
    assert_eq "$rc" 0 "exit"
    ranks job.out >r
    assert_eq "$(grep -c "world=4 host=n[12] cvd=0,1$" r)" 4 "ranks on GPUs 0,1"
    assert_grep "SLURM_GPUS_ON_NODE" job.out
    assert_slurm_clean
'

expect_success "--emit sbatch --num_gpus 2 on this GPU cluster asks for --gpus-per-node=2, and sbatch runs it" '
    run_capture rc out err "$DSL" --dry-run --emit sbatch=gjob.sh --num_nodes 2 --num_gpus 2 ./envp.sh
    cat err >&2
    assert_eq "$rc" 0 "emit"
    assert_grep "^#SBATCH --gpus-per-node=2$" gjob.sh
    assert_not_grep "could not be told" gjob.sh
    run_capture rc out err sbatch --wait -o "$PWD/gjob.out" gjob.sh
    cat gjob.out >&2
    assert_eq "$rc" 0 "exit"
    ranks gjob.out >r
    assert_eq "$(grep -c "world=4 host=n[12] cvd=0,1$" r)" 4 "ranks on GPUs 0,1"
    assert_slurm_clean
'

expect_success "salloc --gres=gpu:3 sets no GPU variable there: --num_gpus 3 says it" '
    run_capture rc out err salloc -N2 --gres=gpu:3 "$DSL" --num_gpus 3 ./envp.sh
    cat err >&2
    assert_eq "$rc" 0 "exit"
    ranks out >r
    assert_eq "$(grep -c "world=6 host=n[12] cvd=0,1,2$" r)" 6 "ranks on GPUs 0,1,2"
    assert_slurm_clean
'

expect_success "--gpus=3 on 2 nodes: Slurm splits it unevenly, so dslaunch asks for --gpus-per-node" '
    run_capture rc out err salloc -N2 --gpus=3 "$DSL" ./envp.sh
    assert_eq "$rc" 2 "exit"
    assert_grep "does not say how many GPUs each of the 2 nodes got" err
    assert_slurm_clean
'

expect_success "more slots than the step has GPUs: the rank start fails naming Slurm s list" '
    run_capture rc out err salloc -N2 --gres=gpu:1 "$DSL" --num_gpus 2 ./envp.sh
    cat err >&2
    [ "$rc" != 0 ] || fail "it ran"
    assert_grep "device 1 is not among the GPUs Slurm gave this node" err
    [ -z "$(grep -o "R rank=.*" out)" ] || fail "a rank started"
    assert_slurm_clean
'

done_testing
