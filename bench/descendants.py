#!/usr/bin/env python3
"""Descendant clean-up: how long until nothing a job started is left, per containment
mode and outcome, and how many processes are left (must be 0).

  python3 bench/descendants.py [BUILD_DIR] [RUNS]
  DSL_WORKER=PATH python3 bench/descendants.py OLD_BUILD_DIR RUNS   (an older dslaunch,
      whose own flow worker lacks "descend", with this tree's worker)

Every run starts two local ranks of the flow tests' worker with "descend": each rank
leaves a setsid child and a double-fork daemon that ignores SIGTERM (the processes a
process-group kill misses). Then one of four things ends the job, at time t0:

  clean     both ranks exit 0 (they wait for a trigger file the script writes at t0)
  failure   rank 1 exits 1 on the trigger; rank 0 is stopped with SIGTERM
  ctrl-c    SIGINT to dslaunch
  agent-kill SIGKILL to the node agent (dslaunch's child); the agent's clean-up process
            finishes the teardown (under process tracking the script first waits 1.2 s,
            two of the tracker's 0.5 s reports)

"gone" is the time from t0 until the last of the four descendant pids is dead (polled
every millisecond); "return" is the time until dslaunch exits. Leftovers are counted
15 s after t0 (and then killed). --term-timeout is 1 s, so the SIGTERM-ignoring daemon
after a clean exit takes that grace plus the kill. Modes the machine cannot provide are
reported as skipped. Prints a markdown table (medians and maxima over RUNS).
"""
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time

from benchlib import alive, machine_line

BUILD = sys.argv[1] if len(sys.argv) > 1 else "build"
RUNS = int(sys.argv[2]) if len(sys.argv) > 2 else 5
DSL = os.path.abspath(os.path.join(BUILD, "dslaunch"))
W = os.path.abspath(os.environ.get("DSL_WORKER") or os.path.join(BUILD, "tests", "flow_worker"))
MODES = ["auto", "v1", "v2", "tracking"]
OUTCOMES = ["clean", "failure", "ctrl-c", "agent-kill"]


def wait_file(path, bound=20.0):
    end = time.monotonic() + bound
    while time.monotonic() < end:
        if os.path.exists(path) and os.path.getsize(path) > 0:
            return True
        time.sleep(0.005)
    return False


def contain_line(mode):
    env = dict(os.environ, DSLAUNCH_CONTAIN=mode)
    out = subprocess.run([DSL, "--check", "--include", "localhost:0"], env=env,
                         capture_output=True, text=True).stderr
    for line in out.splitlines():
        if line.startswith("node 0 ranks contained by: "):
            return line.split(": ", 1)[1]
    return ""


def one_run(mode, outcome, tmp):
    base = os.path.join(tmp, f"{mode}.{outcome}")
    env = dict(os.environ, DSLAUNCH_CONTAIN=mode, FLOW_PIDFILE=base, DSLAUNCH_LOCAL_SLOTS="2",
               OMP_NUM_THREADS="1")
    job = {"clean": ["descend", "await", "9", "exit", "0"],
           "failure": ["descend", "only", "1", "await", "9", "exit", "1"],
           "ctrl-c": ["descend", "sleep", "600"],
           "agent-kill": ["descend", "sleep", "600"]}[outcome]
    p = subprocess.Popen([DSL, "-q", "--term-timeout", "1", "--include", "localhost:0,1", W] + job,
                         env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for r in (0, 1):
        if not wait_file(f"{base}.{r}.ready"):
            p.kill()
            raise RuntimeError(f"rank {r} did not start its descendants")
    pids = []
    for r in (0, 1):
        for s in ("sid", "dmn"):
            with open(f"{base}.{r}.{s}") as f:
                pids.append(int(f.read().split()[0]))
    if outcome == "agent-kill" and mode == "tracking":
        time.sleep(1.2)
    agent = None
    if outcome == "agent-kill":
        for d in os.listdir("/proc"):
            if d.isdigit():
                try:
                    with open(f"/proc/{d}/stat") as f:
                        if int(f.read().rsplit(")", 1)[1].split()[1]) == p.pid:
                            agent = int(d)
                except (OSError, ValueError, IndexError):
                    pass
    t0 = time.monotonic()
    if outcome in ("clean", "failure"):
        with open(f"{base}.9.ready", "w") as f:
            f.write("go\n")
    elif outcome == "ctrl-c":
        p.send_signal(signal.SIGINT)
    else:
        os.kill(agent, signal.SIGKILL)
    gone = ret = None
    while time.monotonic() - t0 < 15:
        now = time.monotonic()
        if gone is None and not any(alive(x) for x in pids):
            gone = now - t0
        if ret is None and p.poll() is not None:
            ret = now - t0
        if gone is not None and ret is not None:
            break
        time.sleep(0.001)
    if ret is None:
        p.kill()
        p.wait()
    left = [x for x in pids if alive(x)]
    for x in left:
        os.kill(x, signal.SIGKILL)
    return gone, ret, len(left)


def main():
    if not (os.access(DSL, os.X_OK) and os.access(W, os.X_OK)):
        sys.exit(f"build dslaunch and the flow worker first ({DSL}, {W})")
    print("| mode (containment) | outcome | runs | gone: median / max (s) | dslaunch returned: median (s) | leftovers |")
    print("|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for mode in MODES:
            line = contain_line(mode)
            if mode != "tracking" and not line.startswith("cgroup"):
                print(f"| {mode} ({line or '?'}) | all | 0 | skipped: no cgroup here | | |")
                continue
            for outcome in OUTCOMES:
                gones, rets, lefts = [], [], 0
                for i in range(RUNS):
                    sub = os.path.join(tmp, f"r{i}")
                    os.makedirs(sub, exist_ok=True)
                    g, r, n = one_run(mode, outcome, sub)
                    lefts += n
                    if g is not None:
                        gones.append(g)
                    if r is not None:
                        rets.append(r)
                gs = f"{statistics.median(gones):.3f} / {max(gones):.3f}" if gones else "never"
                rs = f"{statistics.median(rets):.3f}" if rets else "never"
                print(f"| {mode} ({line}) | {outcome} | {RUNS} | {gs} | {rs} | {lefts} |")
    print("\n" + machine_line())


if __name__ == "__main__":
    main()
