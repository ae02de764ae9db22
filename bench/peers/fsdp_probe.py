"""Does PyTorch FSDP train on the CPU with Gloo here? Two ranks (env://), a small
Sequential wrapped whole, three Adam steps; prints "fsdp ok LOSS" on success, else the
exception's last line. bench/zero3.sh runs it to say why its FSDP peer cannot run.

Debian's torch 1.13 on Python 3.11 cannot even import FSDP: its sharded-tensor metadata
uses a dataclass instance as a field default, which Python 3.11 refuses; making that one
class hashable lets the import through, so the probe reaches FSDP itself."""
import dataclasses

_orig_dataclass = dataclasses.dataclass


def _dataclass(cls=None, **kw):
    def wrap(c):
        if c.__name__ == "TensorProperties":
            kw.setdefault("unsafe_hash", True)
        return _orig_dataclass(c, **kw)
    return wrap if cls is None else wrap(cls)


dataclasses.dataclass = _dataclass

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

dist.init_process_group("gloo")
try:
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
    m = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10))
    m = FSDP(m, device_id=torch.device("cpu"))
    opt = torch.optim.Adam(m.parameters(), 1e-3)
    x, y = torch.randn(8, 64), torch.randint(0, 10, (8,))
    for _ in range(3):
        loss = torch.nn.functional.cross_entropy(m(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    print("fsdp ok", loss.item())
except Exception as e:  # the reason is the probe's answer
    print(f"torch {torch.__version__}: {type(e).__name__}: {e}")
finally:
    dist.destroy_process_group()
