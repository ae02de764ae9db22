# A PyTorch DDP program as users write them (Gloo, env://, printing on rank 0 only),
# for the hang tests (torch_hang.sh). usage: python3 ddp.py MODE SECONDS
#   healthy  train in lock step for SECONDS, then exit 0
#   loading  a silent loading phase of SECONDS on every rank before the first print,
#            then train briefly
#   straggler  train for SECONDS, printing at the first step only, rank 1 doing four
#            times rank 0's work: rank 0 waits for it in most allreduces
#   sleep    rank 1 deadlocks on a lock of its own (asleep outside any collective)
#   spin     rank 1 spins in a Python loop (CPU busy, no collective)
#   stop     rank 1 stops itself with SIGSTOP
#   exit     rank 1 exits 0 before joining the process group; the others wait for it
#   quit     rank 1 exits 0 in the middle of training (Gloo fails the others' collective)
#   allwait  every rank waits in a receive that no rank sends: no rank is missing
# The culprits act at step 20, after rank 0 printed; the ranks stay in lock step, as
# DDP's gradient allreduce keeps them.
import os, signal, sys, threading, time

mode, seconds = sys.argv[1], float(sys.argv[2])
rank = int(os.environ["RANK"])
if mode == "exit" and rank == 1:
    sys.exit(0)

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

dist.init_process_group("gloo")
torch.manual_seed(0)
model = DDP(torch.nn.Linear(32, 8))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
if mode == "loading":
    time.sleep(seconds)  # reading a data set, silently
    seconds = 1.0
t0 = time.time()
step = 0
while True:
    if rank == 1 and step == 20:
        if mode == "sleep":
            lock = threading.Lock()
            lock.acquire()
            lock.acquire()
        elif mode == "spin":
            while True:
                pass
        elif mode == "stop":
            os.kill(os.getpid(), signal.SIGSTOP)
        elif mode == "quit":
            sys.exit(0)
    if mode == "allwait" and step == 20:
        dist.recv(torch.zeros(1), src=(rank + 1) % dist.get_world_size())
    done = torch.tensor([float(time.time() - t0 > seconds)])
    dist.broadcast(done, 0)  # rank 0's clock decides, for every rank
    if done.item():
        break
    x = torch.randn(16, 32)
    if mode == "straggler":  # a bigger batch, forward and backward outside DDP
        for _ in range(4 if rank == 1 else 1):
            model.module(torch.randn(4096, 32)).sum().backward()
    loss = model(x).sum()
    opt.zero_grad()
    loss.backward()
    opt.step()
    if rank == 0 and step % 5 == 0 and (mode != "straggler" or step == 0):
        print(f"step {step} loss {loss.item():.4f}", flush=True)
    step += 1
dist.destroy_process_group()
