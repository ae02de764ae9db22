#!/usr/bin/env python3
"""Memory of dstrain's token data: two ranks (env contract, loopback) train a tiny GPT
for 30 steps on llm.c shards, and a poller reads each rank's /proc/PID/status every
20 ms: the peak of RssAnon (private memory: a copy of the shards per rank shows here),
of RssFile (mapped file pages, shared by the ranks of a node) and VmHWM.

  python3 bench/token_memory.py DSTRAIN [DSTRAIN ...] [--mtokens N] [--rounds R]

Each DSTRAIN (e.g. a build of an older commit beside this one) runs R times in turn
on the same shards: two training shards of N/2 million random byte tokens each (N
default 200, i.e. 400 MB of shards) and a small validation shard, written once into
a temporary directory and removed at the end. Prints each run's figures and the
summary line, whose losses must agree between builds.
"""
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import time


def shard(path, n):
    hdr = [0] * 256
    hdr[0], hdr[1], hdr[2] = 20240520, 1, n
    with open(path, "wb") as f:
        f.write(struct.pack("<256i", *hdr))
        left = n
        while left:
            k = min(left, 1 << 24)
            raw = os.urandom(k)  # a byte id and a zero byte: little-endian uint16 < 256
            buf = bytearray(2 * k)
            buf[0::2] = raw
            f.write(buf)
            left -= k


def run(exe, data, port):
    procs = []
    for r in range(2):
        env = dict(os.environ, RANK=str(r), WORLD_SIZE="2", LOCAL_RANK=str(r),
                   LOCAL_WORLD_SIZE="2", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                   DSLAUNCH_RUN_ID="tokmem%d" % port, DSLAUNCH_RUN_TOKEN="bench")
        procs.append(subprocess.Popen(
            [exe, "--data", "tokens", "--data-path", data, "--model", "gpt", "--layers", "1",
             "--dim", "32", "--heads", "2", "--context", "64", "--vocab", "256",
             "--micro-batch", "8", "--steps", "30", "--eval-interval", "1000",
             "--threads", "1", "--steps-per-print", "0"],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT))
    peak = [{"RssAnon": 0, "RssFile": 0, "VmHWM": 0} for _ in procs]
    t0 = time.time()
    while any(p.poll() is None for p in procs):
        for i, p in enumerate(procs):
            try:
                lines = open("/proc/%d/status" % p.pid).read().splitlines()
            except OSError:
                continue
            for line in lines:
                key = line.split(":")[0]
                if key in peak[i]:
                    peak[i][key] = max(peak[i][key], int(line.split()[1]))
        time.sleep(0.02)
    wall = time.time() - t0
    out = procs[0].stdout.read().decode(errors="replace")
    procs[1].stdout.read()
    rcs = [p.returncode for p in procs]
    summary = [l for l in out.splitlines() if l.startswith("summary:")]
    print("%s: exit %s, %.1f s" % (exe, rcs, wall))
    for i, pk in enumerate(peak):
        print("  rank %d: peak RssAnon %d MiB, RssFile %d MiB, VmHWM %d MiB"
              % (i, pk["RssAnon"] // 1024, pk["RssFile"] // 1024, pk["VmHWM"] // 1024))
    print("  " + (summary[0] if summary else out[-600:]))


def main():
    args = sys.argv[1:]
    mtok, rounds, exes = 200, 1, []
    while args:
        a = args.pop(0)
        if a == "--mtokens":
            mtok = int(args.pop(0))
        elif a == "--rounds":
            rounds = int(args.pop(0))
        else:
            exes.append(a)
    if not exes:
        sys.exit(__doc__)
    tmp = tempfile.mkdtemp(prefix="dsbench-tokmem.")
    try:
        half = mtok * 1000000 // 2
        shard(os.path.join(tmp, "big_train_000001.bin"), half)
        shard(os.path.join(tmp, "big_train_000002.bin"), half)
        shard(os.path.join(tmp, "big_val_000000.bin"), 100000)
        print("# %s; %d M training tokens in 2 shards (%d MB); load: %s"
              % (time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()), mtok, mtok * 2,
                 open("/proc/loadavg").read().split()[0]))
        port = 20000 + os.getpid() % 10000
        for _ in range(rounds):
            for exe in exes:
                run(exe, tmp, port)
                port += 1
    finally:
        shutil.rmtree(tmp)


if __name__ == "__main__":
    main()
