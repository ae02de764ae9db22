# PyTorch Gloo peer for bench/allreduce.sh: a Gloo all-reduce loop (torch.distributed,
# the same timing method as dsbench) swept over MIN (default 1 KiB) .. MAX bytes by factors of 2.
# Launch with torchrun, or start every rank with RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT
# set (bench/allreduce_net.sh): gloo_allreduce_sweep.py [MAX [MIN]]
import os, sys, time, torch, torch.distributed as dist
dist.init_process_group("gloo")
r, n = dist.get_rank(), dist.get_world_size()
maxb = int(sys.argv[1]) if len(sys.argv) > 1 else 512 << 20
nbytes = int(sys.argv[2]) if len(sys.argv) > 2 else 1024
while nbytes <= maxb:
    t = torch.ones(nbytes // 4)
    iters = 5 if nbytes >= (16 << 20) else 50
    dist.all_reduce(t); dist.barrier()
    t0 = time.perf_counter()
    for _ in range(iters):
        dist.all_reduce(t)
    dt = (time.perf_counter() - t0) / iters
    alg = nbytes / dt / 1e9
    if r == 0:
        print(f"gloo n={n} bytes={nbytes} time_us={dt*1e6:.1f} algbw={alg:.3f} GB/s busbw={alg*2*(n-1)/n:.3f} GB/s", flush=True)
    del t
    nbytes *= 2
dist.destroy_process_group()
