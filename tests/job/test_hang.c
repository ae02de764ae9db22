/* Unit tests of the hang verdicts (hang.c): whom the judge names, and when it does. */
#include <string.h>

#include "job/hang.h"
#include "job/hang_stack.h"
#include "test.h"

#define N 8

static struct dsl_hang_rank R[N];
static int stuck[N];

/* n live ranks, armed, all at step 10 in allreduce #100 since t = 5 */
static void world(int n)
{
    memset(R, 0, sizeof(R));
    for (int i = 0; i < n; i++) {
        R[i].rank = i;
        R[i].host = i < n / 2 ? "node1" : "node2";
        R[i].pid = 1000 + i;
        R[i].life = DSL_HANG_RUNNING;
        R[i].armed = 1;
        R[i].reports = 1;
        R[i].t_advance = 5;
        R[i].pstate = 'S';
        R[i].v.form = DSL_PROGRESS_RECORD;
        R[i].v.has_step = 1;
        R[i].v.step = 10;
        R[i].v.coll_seq = 100;
        R[i].v.coll_kind = DSL_PROGRESS_ALLREDUCE;
        R[i].v.in_coll = 1;
    }
}

/* rank r exited with code at time t */
static void exit_rank(int r, int code, double t)
{
    R[r].life = DSL_HANG_EXITED;
    R[r].code = code;
    R[r].t_exit = t;
}

/* rank r left collective #seq and entered no other */
static void leave_coll(int r, unsigned seq)
{
    R[r].v.coll_seq = seq;
    R[r].v.in_coll = 0;
}

static struct dsl_hang_verdict judge(int n, double now, double timeout)
{
    struct dsl_hang_verdict v = {.stuck = stuck};
    dsl_hang_judge(R, n, now, timeout, NULL, &v);
    return v;
}

/* v has hang, nstuck and first (-1: not checked) and text (NULL: not checked) */
static void expect_verdict(struct dsl_hang_verdict v, int hang, int nstuck, int first,
                           const char *text)
{
    if (hang >= 0)
        ASSERT_EQ(v.hang, hang);
    if (nstuck >= 0)
        ASSERT_EQ(v.nstuck, nstuck);
    if (first >= 0)
        ASSERT_EQ(v.first, first);
    if (text)
        ASSERT_STR_EQ(v.text, text);
}

TEST(ranklist_should_write_ranges)
{
    char buf[64];
    int a[] = {0, 1, 2, 3, 4, 6, 7, 9};
    dsl_hang_ranklist(a, 8, buf, sizeof(buf));
    ASSERT_STR_EQ(buf, "0-4,6-7,9");
    dsl_hang_ranklist(a, 1, buf, sizeof(buf));
    ASSERT_STR_EQ(buf, "0");
    dsl_hang_ranklist(a, 0, buf, sizeof(buf));
    ASSERT_STR_EQ(buf, "");
    int many[40];
    for (int i = 0; i < 40; i++)
        many[i] = 3 * i;
    dsl_hang_ranklist(many, 40, buf, 16);
    ASSERT(strlen(buf) < 16);
    ASSERT_CONTAINS(buf, "...");
}

TEST(judge_should_wait_for_the_timeout)
{
    world(4);
    struct dsl_hang_verdict v = judge(4, 300, 300);
    ASSERT_EQ(v.hang, 0); /* quiet for 295 s */
    v = judge(4, 305, 300);
    ASSERT_EQ(v.hang, 1);
    v = judge(4, 1e6, 0); /* off */
    ASSERT_EQ(v.hang, 0);
}

TEST(judge_should_name_the_rank_that_never_entered_the_collective)
{
    world(8);
    /* rank 5 is stuck in compute after leaving #99; the others wait in #100 */
    leave_coll(5, 99);
    R[5].pid = 4242;
    R[5].t_advance = 3;
    struct dsl_hang_verdict v = judge(8, 400, 300);
    ASSERT_EQ(v.stuck[0], 5);
    expect_verdict(v, 1, 1, 5, "rank 5 (node2, pid 4242) never entered allreduce #100; "
                               "ranks 0-4,6-7 wait in it");
}

TEST(judge_should_name_a_rank_that_left_the_collective_and_went_quiet)
{
    world(2);
    R[1].v.in_coll = 0; /* left #100, then nothing */
    struct dsl_hang_verdict v = judge(2, 400, 300);
    ASSERT_EQ(v.first, 1);
    ASSERT_CONTAINS(v.text, "rank 1 (node2, pid 1001) left allreduce #100 and made no "
                            "progress since; rank 0 waits in it");
}

TEST(judge_should_not_name_victims_inside_an_older_collective)
{
    /* rank 3 stopped inside #99 after ranks 0-1 completed it; ranks 2 and 4 still
       wait in #99 for its data, ranks 0-1 wait in #100 */
    world(5);
    for (int i = 2; i < 5; i++)
        R[i].v.coll_seq = 99;
    R[3].pstate = 'T';
    struct dsl_hang_verdict v = judge(5, 400, 300);
    expect_verdict(v, -1, 1, 3, NULL);
    ASSERT_CONTAINS(v.text, "rank 3 (node2, pid 1003, stopped) never entered allreduce #100; "
                            "ranks 0-1 wait in it");
    /* nobody stopped, nobody outside a collective: every rank not in #100 is named */
    R[3].pstate = 'S';
    v = judge(5, 400, 300);
    ASSERT_EQ(v.nstuck, 3);
}

TEST(judge_should_name_a_stopped_rank_when_all_are_inside)
{
    world(4);
    R[2].pstate = 'T';
    struct dsl_hang_verdict v = judge(4, 400, 300);
    expect_verdict(v, -1, 1, 2, "rank 2 (node2, pid 1002, stopped) makes no progress inside "
                                "allreduce #100; ranks 0-1,3 wait in it");
}

TEST(judge_should_blame_the_collective_when_nobody_is_missing)
{
    world(4);
    struct dsl_hang_verdict v = judge(4, 400, 300);
    expect_verdict(v, 1, 4, -1, NULL);
    ASSERT_CONTAINS(v.text, "every rank waits in allreduce #100 (ranks 0-3)");
}

TEST(judge_should_name_a_rank_that_exited_without_entering)
{
    world(2);
    exit_rank(0, 0, 12);
    leave_coll(0, 99);
    struct dsl_hang_verdict v = judge(2, 312, 300);
    ASSERT_EQ(v.stuck[0], 1);
    expect_verdict(v, 1, 1, 0, "rank 0 exited 0 at 12.0 s without entering allreduce #100; "
                               "rank 1 (node2, pid 1001) still running at 312.0 s, waiting in it");
}

/* n live ranks of a program that reports no progress (it prints, or not): armed by
   --hang-timeout, quiet since t = 12, the probes in, every rank asleep outside the
   collectives */
static struct dsl_hang_job J;

static void silent_world(int n)
{
    world(n);
    for (int i = 0; i < n; i++) {
        R[i].v.form = DSL_PROGRESS_EMPTY;
        R[i].v.has_step = 0;
        R[i].v.coll_seq = 0;
        R[i].v.in_coll = 0;
        R[i].reports = 0;
        R[i].t_advance = 12;
        R[i].wait = DSL_HANG_WAIT_NO;
    }
    J = (struct dsl_hang_job){.t_quiet = 12, .lively = 1, .probed = 1};
}

/* the probes found ranks 0..n-1 waiting inside what */
static void wait_inside(int n, const char *what)
{
    for (int i = 0; i < n; i++) {
        R[i].wait = DSL_HANG_WAIT_IN;
        R[i].wait_what = what;
    }
}

static struct dsl_hang_verdict judge_job(int n, double now, double timeout)
{
    struct dsl_hang_verdict v = {.stuck = stuck};
    dsl_hang_judge(R, n, now, timeout, &J, &v);
    return v;
}

TEST(judge_should_report_a_rank_outliving_one_that_exited_0)
{
    /* no collectives: a program that only prints; rank 1 sleeps forever */
    silent_world(2);
    exit_rank(0, 0, 12);
    struct dsl_hang_verdict v = judge_job(2, 311, 300);
    ASSERT_EQ(v.hang, 0);
    v = judge_job(2, 312, 300);
    expect_verdict(v, 1, -1, 1, "rank 0 exited 0 at 12.0 s; rank 1 (node2, pid 1001) still "
                                "running at 312.0 s, no progress for 300.0 s");
}

TEST(judge_should_not_name_a_silent_rank_while_another_prints)
{
    /* DDP in lock step, printing on rank 0 only: rank 1 never said a word */
    silent_world(2);
    R[1].t_advance = 0;
    R[0].t_advance = J.t_quiet = 1e4;
    struct dsl_hang_verdict v = judge_job(2, 1e4 + 1, 5);
    ASSERT_EQ(v.hang, 0);
    v = judge(2, 1e4 + 1, 5); /* nor without the job's picture */
    ASSERT_EQ(v.hang, 0);
}

TEST(judge_should_wait_for_the_probes_before_judging_the_job)
{
    silent_world(2);
    J.probed = 0;
    ASSERT_EQ(judge_job(2, 1e4, 5).hang, 0);
    J.probed = 1;
    ASSERT_EQ(judge_job(2, 16.9, 5).hang, 0); /* quiet for less than the timeout */
    ASSERT_EQ(judge_job(2, 17, 5).hang, 1);
}

TEST(judge_should_not_judge_a_job_that_never_showed_progress_by_its_silence)
{
    /* a silent loading phase, longer than the timeout */
    silent_world(2);
    J.lively = 0;
    J.t_quiet = 0;
    ASSERT_EQ(judge_job(2, 100, 5).hang, 0);
    R[1].pstate = 'T'; /* but a stopped rank is evidence */
    struct dsl_hang_verdict v = judge_job(2, 100, 5);
    expect_verdict(v, 1, 1, -1, "rank 1 (node2, pid 1001, stopped) is stopped; no progress "
                                "anywhere for 100.0 s");
}

TEST(judge_should_leave_a_quiet_job_running_while_it_computes_outside_collectives)
{
    silent_world(2);
    R[0].busy = 1;
    ASSERT_EQ(judge_job(2, 100, 5).hang, 0);
    R[0].busy = 0;
    struct dsl_hang_verdict v = judge_job(2, 100, 5);
    expect_verdict(v, 1, 2, -1, "no progress anywhere for 88.0 s and no rank waits in a "
                                "collective: rank 0 (node1, pid 1000) and rank 1 (node2, pid "
                                "1001) sleep outside any collective (no CPU time)");
}

TEST(judge_should_name_only_the_rank_asleep_outside_the_collective_the_others_wait_in)
{
    silent_world(4);
    wait_inside(4, "a gloo collective");
    R[3].wait = DSL_HANG_WAIT_NO;
    R[3].wait_what = NULL;
    struct dsl_hang_verdict v = judge_job(4, 17.5, 5);
    expect_verdict(v, 1, 1, 3, "rank 3 (node2, pid 1003) sleeps outside any collective (no CPU "
                               "time); ranks 0-2 wait inside a gloo collective for it; no "
                               "progress anywhere for 5.5 s");
}

TEST(judge_should_name_a_spinning_rank_after_three_quarters_of_the_timeout_and_a_stopped_one_as_such)
{
    silent_world(4);
    wait_inside(4, NULL);
    for (int i = 0; i < 4; i++)
        R[i].waited = 2.5;
    R[1].wait = DSL_HANG_WAIT_NO;
    R[1].busy = 1;
    /* a rank at work outside (a save, an evaluation on one rank) may keep the others
       waiting for a while: half the timeout is not enough to name it */
    ASSERT_EQ(judge_job(4, 17, 5).hang, 0);
    for (int i = 0; i < 4; i++)
        R[i].waited = 3.75;
    struct dsl_hang_verdict v = judge_job(4, 17, 5);
    expect_verdict(v, -1, 1, -1, "rank 1 (node1, pid 1001) is busy outside any collective (CPU "
                                 "time or I/O advancing); ranks 0,2-3 wait inside a collective for "
                                 "it; no progress anywhere for 5.0 s");
    /* stopped inside the collective: its stack shows the wait, its state the cause */
    silent_world(2);
    R[0].wait = R[1].wait = DSL_HANG_WAIT_IN;
    R[0].wait_what = R[1].wait_what = "a gloo collective";
    R[0].pstate = 'T';
    v = judge_job(2, 17, 5);
    expect_verdict(v, -1, 1, 0, "rank 0 (node1, pid 1000, stopped) is stopped; rank 1 waits inside "
                                "a gloo collective for it; no progress anywhere for 5.0 s");
}

TEST(judge_should_name_a_rank_that_exited_0_while_the_others_wait_for_it)
{
    silent_world(3);
    R[0].wait = R[2].wait = DSL_HANG_WAIT_IN;
    R[0].wait_what = R[2].wait_what = "the torch.distributed rendezvous (TCPStore)";
    exit_rank(1, 0, 2.5);
    struct dsl_hang_verdict v = judge_job(3, 17, 5);
    expect_verdict(v, 1, 1, 1, "rank 1 (node2) exited 0 at 2.5 s; ranks 0,2 still wait inside the "
                               "torch.distributed rendezvous (TCPStore) for it; no progress "
                               "anywhere for 5.0 s");
}

TEST(judge_should_blame_the_backend_when_every_rank_waits_in_the_collective)
{
    silent_world(4);
    wait_inside(4, "a gloo collective");
    struct dsl_hang_verdict v = judge_job(4, 17, 5);
    expect_verdict(v, 1, 4, -1, "every rank waits inside a gloo collective that does not complete "
                                "(ranks 0-3): none is missing, so the network or the "
                                "communication backend is at fault; no progress anywhere for "
                                "5.0 s");
}

TEST(judge_should_not_name_a_rank_that_computes_before_the_job_showed_progress)
{
    /* rank 0 waits in the rendezvous while rank 1 still imports and loads */
    silent_world(2);
    J.lively = 0;
    J.t_quiet = 0;
    R[0].wait = DSL_HANG_WAIT_IN;
    R[0].waited = 90;
    R[1].busy = 1;
    ASSERT_EQ(judge_job(2, 100, 5).hang, 0);
    J.lively = 1; /* once it printed, the same picture is a rank that spins */
    ASSERT_EQ(judge_job(2, 100, 5).hang, 1);
}

TEST(left_early_should_name_a_peer_that_exited_0_before_a_rank_lost_it)
{
    silent_world(3);
    exit_rank(1, 0, 30);
    exit_rank(0, 1, 30.2);
    struct dsl_hang_verdict v = {.stuck = stuck};
    ASSERT_EQ(dsl_hang_left_early(R, 3, 0, 0, &v), 0); /* it did not say it lost a peer */
    ASSERT_EQ(dsl_hang_left_early(R, 3, 0, 1, &v), 1);
    expect_verdict(v, -1, 1, 1,
                   "rank 1 (node2) exited 0 at 30.0 s while its peers still ran; rank 0 lost it "
                   "in a collective and exited with code 1 at 30.2 s");
    R[1].t_exit = 31; /* the peer finished after the failure: not the cause */
    ASSERT_EQ(dsl_hang_left_early(R, 3, 0, 1, &v), 0);
}

TEST(lost_peer_line_should_know_the_libraries_errors)
{
    ASSERT(dsl_hang_lost_peer_line("RuntimeError: [./gloo/transport/tcp/pair.cc:598] "
                                   "Connection closed by peer [127.0.0.1]:8612"));
    ASSERT(dsl_hang_lost_peer_line("NCCL communicator was aborted on rank 0. Original reason "
                                   "for failure was: NCCL error: remote process exited or "
                                   "there was a network error"));
    ASSERT(!dsl_hang_lost_peer_line("RuntimeError: CUDA out of memory"));
}

TEST(judge_should_not_blame_a_rank_that_reported_a_moment_before_the_others)
{
    /* heartbeats in lock step: all stop within a step of the culprit, whichever wrote
       last; so nobody is "behind" and the job-level evidence decides */
    world(4);
    for (int i = 0; i < 4; i++) {
        R[i].v.form = DSL_PROGRESS_TEXT;
        R[i].v.coll_seq = 0;
        R[i].v.step = 5;
        R[i].t_advance = 10.0 + 0.001 * i;
    }
    struct dsl_hang_verdict v = judge(4, 15.002, 5);
    ASSERT_EQ(v.hang, 0);
    J = (struct dsl_hang_job){.t_quiet = 10.003, .lively = 1, .probed = 1};
    for (int i = 0; i < 4; i++)
        R[i].wait = i == 3 ? DSL_HANG_WAIT_NO : DSL_HANG_WAIT_IN;
    v = judge_job(4, 15.1, 5);
    expect_verdict(v, 1, 1, 3, NULL);
}

TEST(judge_should_name_the_quiet_rank_when_others_advance)
{
    world(4);
    for (int i = 0; i < 4; i++) {
        R[i].v.form = DSL_PROGRESS_TEXT;
        R[i].v.coll_seq = 0;
        R[i].v.step = 97;
        R[i].t_advance = 350;
    }
    R[1].v.step = 41;
    R[1].t_advance = 40;
    struct dsl_hang_verdict v = judge(4, 360, 300);
    expect_verdict(v, -1, 1, 1, "rank 1 (node1, pid 1001) made no progress for 320.0 s (at step "
                                "41); ranks 0,2-3 advanced meanwhile");
}

TEST(judge_should_leave_unarmed_ranks_alone)
{
    world(2);
    R[0].armed = R[1].armed = 0;
    struct dsl_hang_verdict v = judge(2, 1e5, 300);
    ASSERT_EQ(v.hang, 0);
    R[1].armed = 1; /* one armed rank is enough; the unarmed one still counts as behind */
    R[0].v.form = DSL_PROGRESS_EMPTY;
    v = judge(2, 1e5, 300);
    expect_verdict(v, 1, -1, 0, NULL);
    ASSERT_CONTAINS(v.text, "never entered allreduce #100");
}

TEST(cause_should_name_the_peer_a_timed_out_rank_waited_for)
{
    world(2);
    /* rank 0 waited in #100 from t = 5 and timed out at 15; rank 1 never entered it */
    exit_rank(0, 1, 15);
    leave_coll(1, 99);
    R[1].t_advance = 4.9;
    struct dsl_hang_verdict v = {.stuck = stuck};
    ASSERT_EQ(dsl_hang_cause(R, 2, 0, 15.1, &v), 1);
    expect_verdict(v, -1, -1, 1, "rank 1 (node2, pid 1001) never entered allreduce #100 (no "
                                 "progress for 10.2 s); rank 0 waited in it and exited with code 1 "
                                 "after 15.0 s");
    /* a peer that advanced moments ago is not the cause */
    R[1].t_advance = 14.5;
    ASSERT_EQ(dsl_hang_cause(R, 2, 0, 15.1, &v), 0);
    /* unless it is stopped */
    R[1].pstate = 'T';
    ASSERT_EQ(dsl_hang_cause(R, 2, 0, 15.1, &v), 1);
    ASSERT_CONTAINS(v.text, "stopped");
    /* a peer inside the same collective is a fellow victim, not the cause */
    R[1].pstate = 'S';
    R[1].v.coll_seq = 100;
    R[1].v.in_coll = 1;
    R[1].t_advance = 5;
    ASSERT_EQ(dsl_hang_cause(R, 2, 0, 15.1, &v), 0);
}

TEST(cause_should_ignore_signals_and_clean_exits)
{
    world(2);
    R[0].life = DSL_HANG_EXITED;
    R[0].sig = 9;
    R[0].t_exit = 15;
    leave_coll(1, 99);
    R[1].t_advance = 1;
    struct dsl_hang_verdict v = {.stuck = stuck};
    ASSERT_EQ(dsl_hang_cause(R, 2, 0, 15.1, &v), 0); /* a killed rank is its own cause */
    R[0].sig = 0;
    R[0].code = 0;
    ASSERT_EQ(dsl_hang_cause(R, 2, 0, 15.1, &v), 0);
    ASSERT_EQ(dsl_hang_cause(R, 2, 7, 15.1, &v), 0);
}

/* rank 0 saves a checkpoint (left #99, in the saving phase, advancing by the bytes it
   writes); ranks 1..n-1 wait in #100 */
static void saving(int n, double saver_advance)
{
    world(n);
    leave_coll(0, 99);
    R[0].v.phase = DSL_PROGRESS_PHASE_SAVING;
    R[0].t_advance = saver_advance;
}

TEST(excuse_should_cover_ranks_waiting_for_a_peer_that_saves_and_advances)
{
    unsigned char mark[N];
    saving(4, 395);
    ASSERT_EQ(dsl_hang_excuse(R, 4, 400, 300, mark), 3);
    ASSERT_EQ(mark[0], 0);
    ASSERT_EQ(mark[1] + mark[2] + mark[3], 3);
    R[0].v.phase = DSL_PROGRESS_PHASE_LOADING;
    ASSERT_EQ(dsl_hang_excuse(R, 4, 400, 300, mark), 3);
}

TEST(excuse_should_not_cover_a_saver_that_stopped_advancing_or_a_peer_without_a_phase)
{
    unsigned char mark[N];
    saving(4, 3); /* no bytes moved for 397 s: a stuck save */
    ASSERT_EQ(dsl_hang_excuse(R, 4, 400, 300, mark), 0);
    ASSERT_EQ(mark[1], 0);
    saving(4, 395);
    R[0].pstate = 'T';
    ASSERT_EQ(dsl_hang_excuse(R, 4, 400, 300, mark), 0);
    saving(4, 395);
    leave_coll(2, 99); /* a second rank outside the collective, not saving */
    ASSERT_EQ(dsl_hang_excuse(R, 4, 400, 300, mark), 0);
    world(4); /* everybody inside: nobody to wait for */
    ASSERT_EQ(dsl_hang_excuse(R, 4, 400, 300, mark), 0);
    saving(4, 395);
    R[0].v.form = DSL_PROGRESS_TEXT; /* a phase only counts in a record */
    ASSERT_EQ(dsl_hang_excuse(R, 4, 400, 300, mark), 0);
}

TEST(judge_should_name_a_stuck_saver_with_its_phase)
{
    saving(4, 3);
    R[0].pid = 77;
    struct dsl_hang_verdict v = judge(4, 400, 300);
    expect_verdict(v, 1, -1, 0, NULL);
    ASSERT_CONTAINS(v.text, "rank 0 (node1, pid 77, saving a checkpoint) never entered allreduce #100");
}

/* ---- the stacks (hang_stack.c), from eu-stack captures of PyTorch 1.13 DDP ranks ---- */

/* rank 0, waiting in DDP's gradient allreduce for a peer that sleeps */
static const char *const waiting_rank =
    "PID 20918 - process\n"
    "TID 20918:\n"
    "#0  0x00007f4a15ca6f16 __futex_abstimed_wait_common\n"
    "#1  0x00007f4a15ca95d8 pthread_cond_wait@@GLIBC_2.3.2\n"
    "#2  0x00007f4a118a5023 c10d::Reducer::finalize_backward()\n"
    "#3  0x00007f4a118a5891\n"
    "#11 0x00007f4a14dd4676 THPEngine_run_backward(_object*, _object*, _object*)\n"
    "TID 21387:\n"
    "#0  0x00007f4a15ca6f16 __futex_abstimed_wait_common\n"
    "#1  0x00007f4a15ca95d8 pthread_cond_wait@@GLIBC_2.3.2\n"
    "#2  0x00007f4a1186cac1 c10d::ProcessGroupGloo::runLoop(int)\n"
    "TID 21388:\n"
    "#0  0x00007f4a15ca6f16 __futex_abstimed_wait_common\n"
    "#1  0x00007f4a15ca9baf pthread_cond_clockwait@GLIBC_2.30\n"
    "#2  0x00007f4a0b5d8d6b gloo::transport::tcp::UnboundBuffer::waitRecv(int*, "
    "std::chrono::duration<long, std::ratio<1l, 1000l> >)\n"
    "#6  0x00007f4a1186c9d4 c10d::ProcessGroupGloo::runLoop(int)\n";

/* the peer, in time.sleep: gloo's own threads are there, idle */
static const char *const sleeping_rank =
    "PID 20919 - process\n"
    "TID 20919:\n"
    "#0  0x00007f0cf2b0a545 clock_nanosleep@GLIBC_2.2.5\n"
    "#1  0x00000000005d64b4\n"
    "#2  0x000000000052c21a _PyEval_EvalFrameDefault\n"
    "TID 21382:\n"
    "#0  0x00007f0cf2b43f36 epoll_wait\n"
    "#1  0x00007f0ce83caecf gloo::transport::tcp::Loop::run()\n"
    "TID 21385:\n"
    "#0  0x00007f0cf2ac0f16 __futex_abstimed_wait_common\n"
    "#1  0x00007f0cf2ac35d8 pthread_cond_wait@@GLIBC_2.3.2\n"
    "#2  0x00007f0cee66cac1 c10d::ProcessGroupGloo::runLoop(int)\n";

TEST(stack_wait_should_find_a_rank_inside_a_gloo_collective)
{
    const char *what = "x";
    ASSERT_EQ(dsl_hang_stack_wait(waiting_rank, &what), DSL_HANG_WAIT_IN);
    ASSERT_STR_EQ(what, "a torch.distributed collective"); /* the first matching frame */
}

TEST(stack_wait_should_not_count_idle_library_threads_as_a_wait)
{
    const char *what = "x";
    ASSERT_EQ(dsl_hang_stack_wait(sleeping_rank, &what), DSL_HANG_WAIT_NO);
    ASSERT(what == NULL);
}

TEST(stack_wait_should_know_nothing_from_a_capture_without_frames)
{
    ASSERT_EQ(dsl_hang_stack_wait(NULL, NULL), DSL_HANG_WAIT_UNKNOWN);
    ASSERT_EQ(dsl_hang_stack_wait("(no stack tool: install gdb or elfutils' eu-stack)\n", NULL),
              DSL_HANG_WAIT_UNKNOWN);
    ASSERT_EQ(dsl_hang_stack_wait("", NULL), DSL_HANG_WAIT_UNKNOWN);
}

TEST(stack_wait_should_read_gdb_frames_too)
{
    const char *what;
    ASSERT_EQ(dsl_hang_stack_wait("Thread 1 (Thread 0x7f LWP 42 \"dstrain\"):\n"
                                  "#0  0x00007f in __futex_abstimed_wait_common () from libc\n"
                                  "#1  0x0000 in dsl_comm_wait (c=0x1, req=3) at comm.c:400\n",
                                  &what),
              DSL_HANG_WAIT_IN);
    ASSERT_STR_EQ(what, "a dstrain collective");
}

TEST_MAIN()
