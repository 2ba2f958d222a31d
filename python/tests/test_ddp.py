"""DistributedDataParallel trains with chorus as with gloo: the same model,
seed and data on 2 and 3 ranks end with identical parameters on every
rank and within float tolerance of gloo's; also gradient_as_bucket_view with
tiny buckets, the fp16 compression and PowerSGD hooks, find_unused_parameters:
python3 test_ddp.py [case ...]."""
import sys

import torch
import torch.nn as nn

import harness

STEPS = 12


class Net(nn.Module):
    def __init__(self, unused=False):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(32, 64), nn.BatchNorm1d(64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU())
        self.head = nn.Linear(64, 8)
        if unused:
            self.unused = nn.Linear(8, 8)  # never in the graph (find_unused_parameters)

    def forward(self, x):
        return self.head(self.body(x))


def train(rank, size, variant):
    import torch.distributed as dist
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
    from torch.nn.parallel import DistributedDataParallel as DDP

    torch.manual_seed(1234 + rank)  # different initial weights: DDP must broadcast rank 0's
    kw = {}
    if variant == "bucket_view":
        kw = {"gradient_as_bucket_view": True, "bucket_cap_mb": 0.005}
    if variant == "unused":
        kw = {"find_unused_parameters": True}
    model = DDP(Net(unused=variant == "unused"), **kw)
    if variant == "fp16_hook":
        model.register_comm_hook(None, default_hooks.fp16_compress_hook)
    if variant == "powersgd":  # its callbacks issue and wait for more all_reduces
        from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook

        state = powerSGD_hook.PowerSGDState(process_group=None, matrix_approximation_rank=2, start_powerSGD_iter=3)
        model.register_comm_hook(state, powerSGD_hook.powerSGD_hook)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    gen = torch.Generator().manual_seed(99 + rank)
    losses = []
    for _ in range(STEPS):
        x = torch.randn(16, 32, generator=gen)
        y = torch.randn(16, 8, generator=gen)
        opt.zero_grad()
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    state = {k: v.detach().clone() for k, v in model.module.state_dict().items()}
    params = {k for k, _ in model.module.named_parameters()}
    return state, losses, dist.get_backend(), params


def compare(size, variant):
    ours = harness.run(size, train, variant, backend="chorus")
    theirs = harness.run(size, train, variant, backend="gloo")
    assert ours[0][2] == "chorus" and theirs[0][2] == "gloo"
    # Parameters are the same on every rank (buffers such as BatchNorm's
    # running stats are each rank's own after its last forward, as with gloo).
    for r in range(1, size):
        for k in ours[0][3]:
            assert torch.equal(ours[0][0][k], ours[r][0][k]), f"{variant}: rank {r}'s {k} differs from rank 0's"
    tol = {"rtol": 2e-3, "atol": 2e-3} if variant in ("fp16_hook", "powersgd") else {"rtol": 1e-4, "atol": 1e-5}
    for r in range(size):
        for k, v in ours[r][0].items():
            torch.testing.assert_close(v.float(), theirs[r][0][k].float(),
                                       msg=lambda m: f"{variant} rank {r} {k} vs gloo: {m}", **tol)
    assert ours[0][1][-1] < ours[0][1][0] * 1.5, f"loss went from {ours[0][1][0]} to {ours[0][1][-1]}"


def main():
    cases = {}
    for variant in ("default", "bucket_view", "fp16_hook", "powersgd", "unused"):
        cases[variant] = lambda v=variant: [compare(n, v) for n in (2, 3)]
    harness.main(cases)


if __name__ == "__main__":
    main()
