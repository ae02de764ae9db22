#!/usr/bin/env python3
"""The fault cases of docs/reliability.md ("In numbers"), each run several times: time
until dslaunch names the fault, time until dslaunch has exited and every node is
clean, and what is left behind (must be 0).

  python3 bench/faults.py [BUILD_DIR] [RUNS] [CASE...]
  FAULTS_CONTAIN=tracking python3 bench/faults.py ...   (every agent, local and on the
      nodes, contains by that mode: DSLAUNCH_CONTAIN, `cluster.sh contain`)

Needs root (network namespaces for the 3-node cluster of tests/e2e/cluster/cluster.sh,
which it brings up and down itself), dstrain and the flow tests' worker in BUILD_DIR.

The census (what "clean" means), polled every 5 ms from the fault on:
  - live processes whose environment holds DSLAUNCH_RUN_ID=<the job's run id> (every
    rank and all it started, setsid or not), and those holding the case's FLOW_TAG
    (dslaunch, a local agent, its clean-up process);
  - on the cluster, every process in a node's network namespace but sshd (agents,
    clean-up processes, ranks);
  - the job's cgroup directories (dslaunch-<run id>, found from the ranks' own
    /proc/PID/cgroup while they run; a full walk of /sys/fs/cgroup for the final count);
  - its progress files, /dev/shm/dslaunch-<run id>-*.
"Down" is when dslaunch has exited and that census is empty; "leftovers" is the full
census right then, or 20 s after the fault if it is not down by then (whatever is found
is then killed).

Cases (the fault, and what "named" is timed to):
  hang-local    dstrain world 2, rank 1 SIGSTOPped, --hang-timeout 3: the hang warning
  comm-first    the same with DSLAUNCH_COMM_TIMEOUT=3 and --hang-timeout 600: the
                "error: hang:" summary naming rank 1
  hang-3node    dstrain world 6 on 3 namespace nodes, rank 3 (node2) stopped,
                --hang-timeout 4: the hang warning
  oom           flow worker, rank 1 allocates past --rank-memory-limit 50M; the fault
                is rank 1's death: "killed by the OOM killer"
  unread        2 nodes x 2 ranks print 20000 lines each while stdout is not read for
                3 s (3x --keepalive 1): no fault is named; "down" is from dslaunch's
                exit (which must be 0) until every node is clean
  head          2 local ranks print forever into `| head -3`; the fault is head's exit,
                "named" is dslaunch's exit, which must be 141
  save-kill     2 nodes x 2 ranks that take 4 s to save on SIGTERM, the launcher
                SIGKILLed (--term-timeout 10): every rank must finish its save; "down"
                counts the save
  restart       dstrain world 2 --max-restarts 2, rank 1 SIGKILLed after the first
                checkpoint: "named" is the "attempt 1: ... restarting" line, "down" the
                later of attempt 2's start and attempt 1's census being clean; the job
                must exit 0, and its leftovers are counted after that exit
Prints a markdown table: median and maximum over RUNS, leftovers summed over RUNS.
"""
import glob
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time

from benchlib import alive, machine_line

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.dirname(HERE)
BUILD = sys.argv[1] if len(sys.argv) > 1 else "build"
RUNS = int(sys.argv[2]) if len(sys.argv) > 2 else 5
ONLY = sys.argv[3:]
CONTAIN = os.environ.get("FAULTS_CONTAIN", "auto")
DSL = os.path.abspath(os.path.join(BUILD, "dslaunch"))
DSTRAIN = os.path.abspath(os.path.join(BUILD, "dstrain"))
W = os.path.abspath(os.path.join(BUILD, "tests", "flow_worker"))
CLUSTER_SH = os.path.join(SRC, "tests", "e2e", "cluster", "cluster.sh")
TINY = ("--backend tcp --data synthetic --synthetic-train 960 --synthetic-test 96 "
        "--synthetic-dim 24 --hidden 32,16 --micro-batch 8 --bucket-size 200 "
        "--steps-per-print 200 --eval-interval 0 --lr 0.01 --steps 100000000").split()
BOUND = 20.0   # seconds after the fault when leftovers are counted
POLL = 0.005


# ---- processes ----

def proc_env(pid):
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            return f.read().split(b"\0")
    except OSError:
        return []


def pids():
    return [int(d) for d in os.listdir("/proc") if d.isdigit()]


def find_rank(tag, rank, exe_names, bound=90.0):
    want_tag, want_rank = f"FLOW_TAG={tag}".encode(), f"RANK={rank}".encode()
    end = time.monotonic() + bound
    while time.monotonic() < end:
        for p in pids():
            env = proc_env(p)
            if want_tag in env and want_rank in env:
                try:
                    exe = os.path.basename(os.readlink(f"/proc/{p}/exe"))
                except OSError:
                    continue
                if exe in exe_names and alive(p):
                    return p
        time.sleep(0.05)
    raise RuntimeError(f"rank {rank} of {tag} not found")


def run_id_of(pid):
    for e in proc_env(pid):
        if e.startswith(b"DSLAUNCH_RUN_ID="):
            return e.split(b"=", 1)[1].decode()
    return None


def job_cgroups(pid):
    """The job cgroup directories (dslaunch-<id>) a live rank is in, one per hierarchy."""
    out = set()
    try:
        with open(f"/proc/{pid}/cgroup") as f:
            lines = f.read().splitlines()
    except OSError:
        return out
    roots = {}
    with open("/proc/self/mountinfo") as f:
        for line in f:
            parts = line.split()
            sep = parts.index("-")
            fstype, opts = parts[sep + 1], parts[sep + 3].split(",")
            if fstype == "cgroup2":
                roots[""] = parts[4]
            elif fstype == "cgroup":
                key = ",".join(sorted(o for o in opts if o not in ("rw", "ro")))
                roots[key] = parts[4]
    for line in lines:
        _, ctrl, path = line.split(":", 2)
        key = ",".join(sorted(c for c in ctrl.split(",") if c)) if ctrl else ""
        root = roots.get(key)
        if root is None or "/dslaunch-" not in path:
            continue
        j = path.find("/", path.index("/dslaunch-") + 1)
        out.add(root + (path if j < 0 else path[:j]))
    return out


class Census:
    """What a job left: processes, cgroups, progress files."""

    def __init__(self, tag, netns_inodes=()):
        self.tag = f"FLOW_TAG={tag}".encode() if tag else None
        self.ids = set()
        self.cgroups = set()
        self.netns = set(netns_inodes)

    def watch(self, pid):
        rid = run_id_of(pid)
        if rid:
            self.ids.add(rid)
        self.cgroups |= job_cgroups(pid)

    def procs(self):
        keys = {f"DSLAUNCH_RUN_ID={i}".encode() for i in self.ids}
        left = []
        me = os.getpid()
        for p in pids():
            if p == me:
                continue
            hit = False
            if self.netns:
                try:
                    ino = os.stat(f"/proc/{p}/ns/net").st_ino
                except OSError:
                    ino = None
                if ino in self.netns:
                    try:
                        with open(f"/proc/{p}/comm") as f:
                            hit = f.read().strip() != "sshd"
                    except OSError:
                        pass
            if not hit:
                env = proc_env(p)
                hit = (self.tag in env if self.tag else False) or any(k in env for k in keys)
            if hit and alive(p):
                left.append(p)
        return left

    def files(self):
        out = []
        for i in self.ids:
            out += glob.glob(f"/dev/shm/dslaunch-{i}-*")
        return out

    def quick(self):
        """Anything left (fast enough to poll)."""
        return bool(self.procs() or self.files() or any(os.path.isdir(c) for c in self.cgroups))

    def full(self):
        """Every leftover: the polled sets plus a walk of the cgroup hierarchies."""
        left = [f"process {p}" for p in self.procs()]
        left += [f"file {f}" for f in self.files()]
        names = {f"dslaunch-{i}" for i in self.ids}
        for root, dirs, _ in os.walk("/sys/fs/cgroup"):
            if root.count("/") > 12:
                dirs[:] = []
                continue
            for d in dirs:
                if d in names:
                    left.append(f"cgroup {os.path.join(root, d)}")
        return left

    def kill_left(self):
        for p in self.procs():
            try:
                os.kill(p, signal.SIGKILL)
            except OSError:
                pass


# ---- a job and its stderr, timestamped ----

class Job:
    def __init__(self, argv, env, cwd, stdout=subprocess.DEVNULL):
        self.lines = []
        self.p = subprocess.Popen(argv, env=env, cwd=cwd, stdout=stdout,
                                  stderr=subprocess.PIPE, text=True, errors="replace")
        self.exit_t = None
        self.t = threading.Thread(target=self._read, daemon=True)
        self.t.start()

    def _read(self):
        for line in self.p.stderr:
            self.lines.append((time.time(), line.rstrip("\n")))

    def line_time(self, text):
        for t, line in self.lines:
            if text in line:
                return t
        return None

    def poll(self):
        if self.exit_t is None and self.p.poll() is not None:
            self.exit_t = time.time()
        return self.exit_t

    def stop(self):
        if self.p.poll() is None:
            self.p.kill()
        self.p.wait()
        self.t.join(5)


def settle(job, census, t0, extra_done=lambda: True):
    """Poll until dslaunch exited, the census is clean and extra_done(); returns the
    seconds from t0 (None: not within BOUND) and the leftovers at the end."""
    down = None
    while time.time() - t0 < BOUND:
        if job.poll() is not None and extra_done() and not census.quick():
            down = time.time() - t0
            break
        time.sleep(POLL)
    if down is None:
        job.poll()
    left = census.full()
    census.kill_left()
    job.stop()
    return down, left


def env_base(**kv):
    e = dict(os.environ, OMP_NUM_THREADS="1", DSLAUNCH_LOCAL_SLOTS="4")
    for k in ("CUDA_VISIBLE_DEVICES", "PYTHONFAULTHANDLER", "DSLAUNCH_PROGRESS_FILE",
              "NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME"):
        e.pop(k, None)
    e["DSLAUNCH_CONTAIN"] = CONTAIN
    e.update(kv)
    return e


def wait_metrics(path, bound=90.0):
    end = time.monotonic() + bound
    while time.monotonic() < end:
        try:
            with open(path) as f:
                if '"type":"step"' in f.read():
                    return
        except OSError:
            pass
        time.sleep(0.05)
    raise RuntimeError("no training step")


def wait_file(path, bound=30.0):
    end = time.monotonic() + bound
    while time.monotonic() < end:
        if os.path.exists(path) and os.path.getsize(path) > 0:
            return
        time.sleep(0.01)
    raise RuntimeError(f"{path} did not appear")


# ---- the cases: each returns (named s or None, down s or None, leftovers, note) ----

def case_stopped(tmp, cl, n, tag, victim_rank, hang, comm, named_text, ssh=()):
    os.makedirs(tmp, exist_ok=True)
    env = env_base(FLOW_TAG=tag, DSLAUNCH_COMM_TIMEOUT=str(comm), DSLAUNCH_STORE_TIMEOUT="120")
    argv = [DSL, *ssh, "--hang-timeout", str(hang), "--term-timeout", "2"]
    if ssh:
        argv += ["--export", f"FLOW_TAG={tag}", "--export", "OMP_NUM_THREADS",
                 "--export", f"DSLAUNCH_COMM_TIMEOUT={comm}"]
    else:
        argv += ["--include", "localhost:" + ",".join(str(i) for i in range(n))]
    argv += [DSTRAIN, *TINY, "--train-batch", str(8 * n), "--metrics", f"{tmp}/m.json"]
    census = Census(tag, cl["netns"] if ssh else ())
    job = Job(argv, env, tmp)
    try:
        wait_metrics(f"{tmp}/m.json")
        for r in range(n):
            census.watch(find_rank(tag, r, ("dstrain",)))
        victim = find_rank(tag, victim_rank, ("dstrain",))
        os.kill(victim, signal.SIGSTOP)
        t0 = time.time()
        down, left = settle(job, census, t0)
    finally:
        job.stop()
    t = job.line_time(named_text)
    ok = job.p.returncode == 205 and any(f"rank {victim_rank} (" in l and "hang" in l
                                         for _, l in job.lines)
    return (t - t0 if t else None), down, left, "" if ok else f"exit {job.p.returncode}"


def case_oom(tmp, cl):
    os.makedirs(tmp, exist_ok=True)
    tag = f"bfoom.{os.getpid()}.{time.monotonic_ns()}"
    base = f"{tmp}/pf"
    env = env_base(FLOW_TAG=tag, FLOW_PIDFILE=base)
    job = Job([DSL, "--rank-memory-limit", "50M", "--include", "localhost:0,1", W,
               "only", "1", "await", "9", "oom", "200"], env, tmp)
    census = Census(tag)
    try:
        victim = find_rank(tag, 1, ("flow_worker",))
        census.watch(victim)
        census.watch(find_rank(tag, 0, ("flow_worker",)))
        with open(f"{base}.9.ready", "w") as f:
            f.write("go\n")
        while alive(victim):
            time.sleep(0.001)
        t0 = time.time()
        down, left = settle(job, census, t0)
    finally:
        job.stop()
    t = job.line_time("was killed by the OOM killer")
    return (t - t0 if t else None), down, left, "" if job.p.returncode == 137 else f"exit {job.p.returncode}"


def case_unread(tmp, cl):
    os.makedirs(tmp, exist_ok=True)
    tag = f"bfunread.{os.getpid()}.{time.monotonic_ns()}"
    ids = f"{tmp}/ids"
    env = env_base(FLOW_TAG=tag, FLOW_RUNIDS=ids)
    census = Census(tag, cl["netns"])
    job = Job([DSL, "--hostfile", cl["hostfile2"], "--ssh-config", cl["ssh_config"],
               "--keepalive", "1", "--output-buffer", "256K", "--export", "FLOW_RUNIDS",
               W, "print", "20000", "2"], env, tmp, stdout=subprocess.PIPE)
    try:
        time.sleep(3.0)  # nobody reads for 3x --keepalive
        for _ in job.p.stdout:
            pass
        job.p.wait()
        t0 = time.time()
        with open(ids) as f:
            census.ids |= {x.strip() for x in f if x.strip()}
        down, left = settle(job, census, t0)
    finally:
        job.stop()
    return None, down, left, "" if job.p.returncode == 0 else f"exit {job.p.returncode}"


def case_head(tmp, cl):
    os.makedirs(tmp, exist_ok=True)
    tag = f"bfhead.{os.getpid()}.{time.monotonic_ns()}"
    ids = f"{tmp}/ids"
    env = env_base(FLOW_TAG=tag, FLOW_RUNIDS=ids)
    census = Census(tag)
    job = Job([DSL, "--include", "localhost:0,1", W, "print", "0", "0"], env, tmp,
              stdout=subprocess.PIPE)
    try:
        for _ in range(3):
            job.p.stdout.readline()
        job.p.stdout.close()  # head -3 exits
        t0 = time.time()
        wait_file(ids)
        with open(ids) as f:
            census.ids |= {x.strip() for x in f if x.strip()}
        down, left = settle(job, census, t0)
    finally:
        job.stop()
    t = job.exit_t
    return (t - t0 if t else None), down, left, "" if job.p.returncode == 141 else f"exit {job.p.returncode}"


def case_save_kill(tmp, cl):
    os.makedirs(tmp, exist_ok=True)
    tag = f"bfsave.{os.getpid()}.{time.monotonic_ns()}"
    base, ids = f"{tmp}/pf", f"{tmp}/ids"
    env = env_base(FLOW_TAG=tag, FLOW_PIDFILE=base, FLOW_RUNIDS=ids)
    census = Census(tag, cl["netns"])
    job = Job([DSL, "--hostfile", cl["hostfile2"], "--ssh-config", cl["ssh_config"],
               "--term-timeout", "10", "--export", "FLOW_PIDFILE", "--export", "FLOW_RUNIDS",
               W, "on-signal", "0", "4"], env, tmp)
    try:
        for r in range(4):
            wait_file(f"{base}.{r}")
        with open(ids) as f:
            census.ids |= {x.strip() for x in f if x.strip()}
        for r in range(4):
            with open(f"{base}.{r}") as f:
                census.cgroups |= job_cgroups(int(f.read().split()[0]))
        job.p.kill()
        t0 = time.time()
        saved = lambda: all(os.path.exists(f"{base}.{r}.done") for r in range(4))
        down, left = settle(job, census, t0, saved)
    finally:
        job.stop()
    return None, down, left, "" if saved() else "a save did not finish"


def case_restart(tmp, cl):
    os.makedirs(tmp, exist_ok=True)
    tag = f"bfrestart.{os.getpid()}.{time.monotonic_ns()}"
    ck, ids, killed = f"{tmp}/ck", f"{tmp}/ids", f"{tmp}/killed"
    victim = f"{tmp}/victim"
    with open(victim, "w") as f:
        f.write(f"""#!/bin/sh
echo "$DSLAUNCH_RUN_ID" >>"{ids}"
if [ "$DSLAUNCH_RESTART_COUNT" = 0 ] && [ "$RANK" = 1 ]; then
    "{DSTRAIN}" "$@" &
    pid=$!
    while [ ! -e "{ck}/latest" ] && kill -0 $pid 2>/dev/null; do sleep 0.01; done
    date +%s.%N >"{killed}"
    kill -9 $pid
    kill -9 $$
fi
exec "{DSTRAIN}" "$@"
""")
    os.chmod(victim, 0o755)
    model = ("--backend tcp --data synthetic --synthetic-train 4096 --synthetic-test 64 "
             "--synthetic-dim 128 --hidden 256,256 --train-batch 64 --micro-batch 32 "
             "--lr 0.001 --steps-per-print 0 --eval-interval 0 --steps 600 "
             "--save-interval 50").split()
    env = env_base(FLOW_TAG=tag, DSLAUNCH_COMM_TIMEOUT="120", DSLAUNCH_STORE_TIMEOUT="120")
    census = Census(tag)
    job = Job([DSL, "--include", "localhost:0,1", "--max-restarts", "2", victim, *model,
               "--checkpoint-dir", ck], env, tmp)
    try:
        wait_file(killed, 120)
        with open(killed) as f:
            t0 = float(f.read())
        # attempt 1's leftovers (its run id only: attempt 2 carries the same tag)
        with open(ids) as f:
            first = Census(None)
            first.ids = {f.readline().strip()}
        clean1 = None
        while clean1 is None and time.time() - t0 < BOUND:
            if not first.quick():
                clean1 = time.time()
            time.sleep(POLL)
        end = time.monotonic() + 120
        while job.poll() is None and time.monotonic() < end:
            time.sleep(0.05)
        with open(ids) as f:
            census.ids |= {x.strip() for x in f if x.strip()}
        _, left = settle(job, census, time.time())
    finally:
        job.stop()
    t = job.line_time("attempt 1: rank 1")
    t2 = job.line_time("attempt 2:")
    ok = job.p.returncode == 0 and len(census.ids) == 2
    down = max(t2, clean1) - t0 if t2 and clean1 else None
    return (t - t0 if t else None), down, left, "" if ok else f"exit {job.p.returncode}, run ids {sorted(census.ids)}"


CASES = [
    ("hang-local", "dstrain rank SIGSTOPped, world 2, `--hang-timeout 3`",
     lambda tmp, cl: case_stopped(tmp, cl, 2, f"bfhang.{os.getpid()}.{time.monotonic_ns()}",
                                  1, 3, 120, "warning: hang after")),
    ("comm-first", "the same, `DSLAUNCH_COMM_TIMEOUT=3` first",
     lambda tmp, cl: case_stopped(tmp, cl, 2, f"bfcomm.{os.getpid()}.{time.monotonic_ns()}",
                                  1, 600, 3, "error: hang:")),
    ("hang-3node", "dstrain rank on node2 SIGSTOPped, world 6 on 3 nodes, `--hang-timeout 4`",
     lambda tmp, cl: case_stopped(tmp, cl, 6, f"bf3n.{os.getpid()}.{time.monotonic_ns()}",
                                  3, 4, 120, "warning: hang after",
                                  ssh=("--hostfile", cl["hostfile"], "--ssh-config", cl["ssh_config"]))),
    ("oom", "rank past `--rank-memory-limit 50M`", case_oom),
    ("unread", "stdout not read for 3x `--keepalive 1`, 2 nodes", case_unread),
    ("head", "`dslaunch ... \\| head -3`", case_head),
    ("save-kill", "launcher SIGKILLed while 4 ranks on 2 nodes save for 4 s", case_save_kill),
    ("restart", "rank killed once, `--max-restarts 2` (dstrain)", case_restart),
]


def cluster_up(tmp):
    d = os.path.join(tmp, "cluster")
    subprocess.run([CLUSTER_SH, "up", "3", d, "2"], check=True, stderr=subprocess.DEVNULL)
    env = {}
    with open(os.path.join(d, "cluster.env")) as f:
        for line in f:
            k, _, v = line.strip().partition("=")
            env[k] = v
    with open(os.path.join(d, "hostfile")) as f:
        lines = f.readlines()
    with open(os.path.join(d, "hostfile2"), "w") as f:
        f.writelines(lines[:2])
    netns = set()
    for i in range(1, int(env["NODES"]) + 1):
        if CONTAIN != "auto":
            subprocess.run([CLUSTER_SH, "contain", d, str(i), CONTAIN], check=True)
        ns = env.get(f"NS_{i}")
        if ns:
            netns.add(os.stat(f"/run/netns/{ns}").st_ino)
    contain = subprocess.run([DSL, "--check", "--hostfile", os.path.join(d, "hostfile"),
                              "--ssh-config", os.path.join(d, "ssh_config")],
                             capture_output=True, text=True).stderr
    modes = sorted({l.split(": ", 1)[1] for l in contain.splitlines()
                    if " ranks contained by: " in l})
    return {"dir": d, "hostfile": os.path.join(d, "hostfile"),
            "hostfile2": os.path.join(d, "hostfile2"),
            "ssh_config": os.path.join(d, "ssh_config"), "netns": netns, "mode": env["MODE"],
            "contain": modes}


def fmt(xs):
    xs = [x for x in xs if x is not None]
    if not xs:
        return "-"
    return f"{statistics.median(xs):.3f} / {max(xs):.3f}"


def main():
    for path in (DSL, DSTRAIN, W):
        if not os.access(path, os.X_OK):
            sys.exit(f"build it first: {path}")
    tmp = tempfile.mkdtemp(prefix="dsl-faults.")
    cl = None
    try:
        cl = cluster_up(tmp)
        local = subprocess.run([DSL, "--check", "--include", "localhost:0"], env=env_base(),
                               capture_output=True, text=True).stderr
        local = [l.split(": ", 1)[1] for l in local.splitlines() if " ranks contained by: " in l]
        print(f"containment: local {local}; cluster ({cl['mode']} mode) {cl['contain']}\n")
        print("| case | runs | named: median / max (s) | down: median / max (s) | leftovers | notes |")
        print("|---|---|---|---|---|---|")
        for name, what, fn in CASES:
            if ONLY and name not in ONLY:
                continue
            if name == "oom" and CONTAIN == "tracking":
                print(f"| {what} | 0 | | | | not run: a memory limit needs a memory cgroup |")
                continue
            named, downs, lefts, notes = [], [], [], []
            for i in range(RUNS):
                try:
                    n, d, left, note = fn(os.path.join(tmp, f"{name}.{i}"), cl)
                except RuntimeError as e:
                    n, d, left, note = None, None, [], f"run failed: {e}"
                named.append(n)
                downs.append(d)
                lefts += left
                if note:
                    notes.append(note)
                if d is None:
                    notes.append(f"run {i + 1}: not down within {BOUND:.0f} s")
            print(f"| {what} | {RUNS} | {fmt(named)} | {fmt(downs)} | {len(lefts)} | "
                  f"{'; '.join(sorted(set(notes)))} |", flush=True)
            for x in lefts:
                print(f"<!-- {name}: {x} -->", flush=True)
    finally:
        if cl:
            subprocess.run([CLUSTER_SH, "down", cl["dir"]])
        shutil.rmtree(tmp, ignore_errors=True)
    print("\n" + machine_line())


if __name__ == "__main__":
    main()
