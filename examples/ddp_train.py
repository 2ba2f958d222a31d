"""DistributedDataParallel training of a small model on synthetic data.

    torchrun --nproc_per_node=2 examples/ddp_train.py --backend chorus
    torchrun --nproc_per_node=2 examples/ddp_train.py --backend gloo     # to compare

Prints the loss and the time per step on rank 0. With --backend chorus the
package chorus_torch must be importable (make puts it in build/python; the
script adds that folder to sys.path when it is there).
"""
import argparse
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
BUILT = os.path.join(HERE, "..", "build", "python")
if os.path.isdir(os.path.join(BUILT, "chorus_torch")):
    sys.path.insert(0, BUILT)

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.nn as nn  # noqa: E402
from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: E402


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--backend", default="chorus")
    p.add_argument("--steps", type=int, default=50)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--width", type=int, default=1024)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--bucket-cap-mb", type=float, default=25)
    a = p.parse_args()
    if a.backend == "chorus":
        import chorus_torch  # noqa: F401  (torch >= 2.15 also finds it by itself)

    dist.init_process_group(a.backend)
    rank, size = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    layers = []
    for _ in range(a.layers):
        layers += [nn.Linear(a.width, a.width), nn.ReLU()]
    model = DDP(nn.Sequential(*layers, nn.Linear(a.width, 10)), bucket_cap_mb=a.bucket_cap_mb)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    gen = torch.Generator().manual_seed(rank)
    # A learnable synthetic task: the class is which of 10 directions x points to.
    centers = torch.randn(10, a.width, generator=torch.Generator().manual_seed(7))
    times = []
    for step in range(a.steps):
        y = torch.randint(0, 10, (a.batch,), generator=gen)
        x = centers[y] + 0.5 * torch.randn(a.batch, a.width, generator=gen)
        t0 = time.perf_counter()
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        times.append(time.perf_counter() - t0)
        if rank == 0 and (step % 10 == 0 or step == a.steps - 1):
            print(f"step {step:4d}  loss {loss.item():.4f}  {times[-1] * 1e3:.1f} ms/step", flush=True)
    if rank == 0:
        steady = sorted(times[len(times) // 5:]) or times
        print(f"{a.backend}: {size} ranks, median step {steady[len(steady) // 2] * 1e3:.1f} ms", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
