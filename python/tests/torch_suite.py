"""PyTorch's own DistributedTest suite (torch/testing/_internal/distributed/
distributed_test.py, what torch's test_distributed_spawn.py runs for gloo
and NCCL) on chorus: the suite is set up as for gloo (its decorators and
its branches pick the CPU tests gloo runs) and every process group it
makes is a chorus one. The tests of what chorus does not do (below, with
why) are skipped; every other test must pass. Not part of `make test`: it
takes about 20 minutes with 3 ranks on 2 cores.

    PYTHONPATH=build/python python3 python/tests/torch_suite.py [-k PATTERN ...] [-v]
    (WORLD_SIZE=3 by default; needs `pip install expecttest hypothesis`)
"""
import os
import sys
import tempfile
import unittest

os.environ["BACKEND"] = "gloo"  # before the suite is imported: its decorators read it
os.environ.setdefault("WORLD_SIZE", "3")
if "TEMP_DIR" not in os.environ:  # the spawned ranks import this file again and inherit it
    os.environ["TEMP_DIR"] = tempfile.mkdtemp(prefix="chorus-torch-suite-")
    os.makedirs(os.path.join(os.environ["TEMP_DIR"], "barrier"), exist_ok=True)

import chorus_torch  # noqa: E402,F401  registers "chorus"
import torch.distributed as dist  # noqa: E402
import torch.distributed.distributed_c10d as c10d  # noqa: E402

_init_process_group, _new_group = c10d.init_process_group, c10d.new_group


def _chorus(backend):
    return "chorus" if backend is None or str(backend).lower() == "gloo" else backend


def init_process_group(*args, **kwargs):
    if args:
        args = (_chorus(args[0]),) + args[1:]
    else:
        kwargs["backend"] = _chorus(kwargs.get("backend"))
    return _init_process_group(*args, **kwargs)


def new_group(*args, **kwargs):
    if kwargs.get("backend") is not None:
        kwargs["backend"] = _chorus(kwargs["backend"])
    return _new_group(*args, **kwargs)


dist.init_process_group = c10d.init_process_group = init_process_group
dist.new_group = c10d.new_group = new_group

from torch.testing._internal.common_utils import run_tests  # noqa: E402
from torch.testing._internal.distributed.distributed_test import DistributedTest, TestDistBackend  # noqa: E402

# What these tests ask for and chorus does not do, on purpose (README, "PyTorch").
NOT_CHORUS = {
    "test_monitored_barrier_gloo": "monitored_barrier is gloo's alone",
    "test_monitored_barrier_gloo_rank_0_timeout": "monitored_barrier is gloo's alone",
    "test_monitored_barrier_gloo_subgroup": "monitored_barrier is gloo's alone",
    "test_send_recv_any_source": "a receive names its source, as with NCCL",
    "test_send_recv_any_source_autograd_profiler": "a receive names its source, as with NCCL",
    "test_send_recv_any_source_torch_profiler": "a receive names its source, as with NCCL",
    "test_sparse_all_reduce_sum": "sparse tensors are not supported",
    # the suite runs as for gloo, so these compare a name with "gloo"
    "test_get_backend": "the group's backend is named chorus, not gloo",
    "test_ddp_logging_data_cpu": "DDP logs a third-party backend as 'custom', not as its name",
}


class TestDistBackendWithSpawnCHORUS(TestDistBackend, DistributedTest._DistTestBase):
    def setUp(self):
        super().setUp()
        self._spawn_processes()


for _name, _why in NOT_CHORUS.items():
    setattr(TestDistBackendWithSpawnCHORUS, _name, unittest.skip(_why)(getattr(TestDistBackendWithSpawnCHORUS, _name)))

if __name__ == "__main__":
    run_tests()
