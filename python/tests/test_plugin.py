"""How users reach the backend: torch's plugin autoloading at `import
torch`, the lazy entry point by name, torchrun and chorusrun with the example, and the
flight recorder API: python3 test_plugin.py [case ...]."""
import os
import subprocess
import sys

import harness

ROOT = os.path.dirname(os.path.dirname(harness.HERE))
ONE_RANK = """
import os, torch, torch.distributed as dist
os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=os.environ["PORT"])
dist.init_process_group("chorus", rank=0, world_size=1)
t = torch.ones(3); dist.all_reduce(t); assert torch.all(t == 1)
print("backend", dist.get_backend())
dist.destroy_process_group()
"""


def python(code, **env):
    e = dict(os.environ, PORT=str(harness.free_port()), **env)
    return subprocess.run([sys.executable, "-c", code], env=e, capture_output=True, text=True, timeout=120)


def autoload():
    r = python("import sys, torch, torch.distributed as dist; print(hasattr(dist.Backend, 'CHORUS'), 'chorus_torch' in sys.modules)")
    assert r.returncode == 0 and r.stdout.split() == ["True", "True"], (r.stdout, r.stderr[-2000:])


def lazy_entry_point():
    r = python("import sys, torch.distributed as dist; assert not hasattr(dist.Backend, 'CHORUS')\n" + ONE_RANK,
               TORCH_DEVICE_BACKEND_AUTOLOAD="0")
    assert r.returncode == 0 and "backend chorus" in r.stdout, (r.stdout, r.stderr[-2000:])


def torchrun():
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
           os.path.join(ROOT, "examples", "ddp_train.py"), "--backend", "chorus", "--steps", "6", "--width", "64"]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=180, env=dict(os.environ, OMP_NUM_THREADS="1"))
    assert r.returncode == 0 and "chorus: 2 ranks, median step" in r.stdout, (r.stdout, r.stderr[-3000:])


def chorusrun():
    """chorusrun as torchrun: its rendezvous (NCCL_COMM_ID) and torch's store
    (MASTER_PORT) on two ports (they were one, which rank 0's store held)."""
    launcher = os.environ.get("CHORUSRUN") or os.path.join(ROOT, "build", "bin", "chorusrun")
    cmd = [launcher, "-n", "2", sys.executable, os.path.join(ROOT, "examples", "ddp_train.py"),
           "--backend", "chorus", "--steps", "3", "--width", "16"]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=180, env=dict(os.environ, OMP_NUM_THREADS="1"))
    assert r.returncode == 0 and "chorus: 2 ranks, median step" in r.stdout, (r.stdout, r.stderr[-3000:])


UNWAITED = r"""
import atexit, sys
if sys.argv[-1] == "late": atexit.register(lambda: late())  # before import torch registers chorus's
import torch, torch.distributed as dist
def late():  # registered before chorus's handler (at import torch), so it runs after it
    t = torch.arange(6.0).reshape(2, 3)[:, ::2]  # not contiguous: staged in and copied back
    dist.all_reduce(t)
    f = dist.all_reduce(torch.ones(2), async_op=True).get_future()
    assert f.wait()[0].tolist() == [2.0, 2.0]  # completed by chorus's completion threads
    __import__("os").write(1, f"late {t.tolist()}\n".encode())  # one write: the ranks share stdout
    dist.destroy_process_group()
def main():  # the works are dropped as it returns: chorus's threads hold the last references
    dist.init_process_group("chorus")
    x = torch.ones(3); dist.all_reduce(x)
    works = [dist.all_reduce(torch.ones(100000), async_op=True) for _ in range(5)]
    __import__("os").write(1, b"issued\n")
main()
"""


def exit_unwaited():
    """A script that leaves async works unwaited and never calls
    destroy_process_group exits cleanly: chorus's threads, which drop the
    works' tensors and complete their futures, no longer take the GIL while
    the interpreter finalizes (that aborted the process: "terminate called
    without an active exception", in 4 of 6 runs before). A collective in an
    atexit handler that runs after chorus's still gets its result."""
    launcher = os.environ.get("CHORUSRUN") or os.path.join(ROOT, "build", "bin", "chorusrun")
    for attempt in range(4):
        late = attempt % 2  # then an atexit handler after chorus's still gets a collective's result, and destroys
        r = subprocess.run([launcher, "-n", "2", sys.executable, "-c", UNWAITED] + (["late"] if late else []),
                           capture_output=True, text=True, timeout=120, env=dict(os.environ, OMP_NUM_THREADS="1"))
        assert r.returncode == 0 and r.stdout.count("issued") == 2 and "terminate" not in r.stderr, \
            (attempt, r.returncode, r.stdout, r.stderr[-3000:])
        if late:
            assert r.stdout.count("late [[0.0, 4.0], [6.0, 10.0]]") == 2, (r.stdout, r.stderr[-3000:])


NO_DESTROY = r"""
import time, torch, torch.distributed as dist
dist.init_process_group("chorus")
rank = dist.get_rank()
x = torch.ones(3); dist.all_reduce(x)
if rank == 1:
    time.sleep(1)  # rank 2 has left by now
    dist.send(torch.full((1000,), 42.0), 0)
elif rank == 0:
    time.sleep(2)  # rank 1 has left by now
    y = torch.zeros(1000); dist.recv(y, 1)
    __import__("os").write(1, f"got {y[0].item()} {bool(torch.all(y == 42))}\n".encode())
    dist.destroy_process_group()
# ranks 1 and 2 exit without destroy_process_group
"""


def exit_without_destroy():
    """Ranks that exit without destroy_process_group (scripts often leave
    it out) leave as it would: rank 2 goes at once, and ranks 0 and 1 go
    on without it; rank 1 sends and goes, and rank 0 takes what it sent
    after it has gone, as with gloo. Both had failed rank 0's receive:
    "rank 2 ... exited", "rank 1 ... exited"."""
    launcher = os.environ.get("CHORUSRUN") or os.path.join(ROOT, "build", "bin", "chorusrun")
    r = subprocess.run([launcher, "-n", "3", sys.executable, "-c", NO_DESTROY], capture_output=True, text=True,
                       timeout=120, env=dict(os.environ, OMP_NUM_THREADS="1"))
    assert r.returncode == 0 and "got 42.0 True" in r.stdout, (r.returncode, r.stdout, r.stderr[-3000:])


def recorder(rank, size):
    import torch
    import torch.distributed as dist

    import chorus_torch

    t = torch.ones(4, 2)
    dist.all_reduce(t)
    dist.broadcast(t, src=0)
    outs = [torch.zeros(4, 2) for _ in range(size)]
    dist.all_gather(outs, t)
    entries = chorus_torch.flight_recorder()
    ops = [e["op"] for e in entries]
    assert ops[-3:] == ["AllReduce", "Broadcast", "AllGather"], ops
    assert all(e["state"] == "completed" for e in entries), entries
    assert entries[-3]["input_sizes"] == "[[4, 2]]" and entries[-3]["dtype"] == "Float", entries[-3]
    seqs = [e["seq"] for e in entries]
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)


def main():
    harness.main({"autoload": autoload, "lazy_entry_point": lazy_entry_point, "torchrun": torchrun, "chorusrun": chorusrun,
                  "exit_unwaited": exit_unwaited, "exit_without_destroy": exit_without_destroy,
                  "flight_recorder": lambda: harness.run(2, recorder)})


if __name__ == "__main__":
    main()
