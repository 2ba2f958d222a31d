"""Failures are exceptions that name the rank at fault, never hangs: a rank
killed mid-training, mismatched shapes, a stalled rank against the group's
timeout (with the flight recorder in the log), destroy after a failure:
python3 test_faults.py [case ...]."""
import datetime
import os
import re
import signal
import sys
import tempfile
import time

import torch
import torch.distributed as dist
import torch.nn as nn

import harness


def pids():
    out = [None] * dist.get_world_size()
    dist.all_gather_object(out, os.getpid())
    return out


def killed_in_training(rank, size, stamp):
    from torch.nn.parallel import DistributedDataParallel as DDP

    victim = size - 1
    everyone = pids()
    torch.manual_seed(0)
    model = DDP(nn.Sequential(nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 256)))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(32, 256)
    for step in range(10000):
        if rank == victim and step == 20:
            with open(stamp, "w") as f:
                f.write(repr(time.time()))
            os.kill(os.getpid(), signal.SIGKILL)
        try:
            opt.zero_grad()
            model(x).sum().backward()
            opt.step()
        except RuntimeError as e:
            now = time.time()
            died = float(open(stamp).read())
            text = str(e)
            assert now - died < 2.0, f"rank {rank}: the error came {now - died:.2f} s after the death"
            assert f"rank {victim}" in text and f"pid {everyone[victim]}" in text, f"rank {rank}: {text}"
            t0 = time.time()
            dist.destroy_process_group()
            assert time.time() - t0 < 2.0, f"destroy_process_group after the failure took {time.time() - t0:.2f} s"
            return now - died
    raise AssertionError("training went on without the killed rank")


def killed_async(rank, size, stamp):
    victim = 1
    everyone = pids()
    t = torch.ones(1 << 16)
    works = []
    for step in range(100000):
        if rank == victim and step == 50:
            with open(stamp, "w") as f:
                f.write(repr(time.time()))
            os.kill(os.getpid(), signal.SIGKILL)
        works.append(dist.all_reduce(t, async_op=True))
        if len(works) < 8:
            continue
        w = works.pop(0)
        try:
            w.wait()
        except RuntimeError as e:
            died = float(open(stamp).read())
            assert time.time() - died < 2.0
            assert f"rank {victim}" in str(e) and f"pid {everyone[victim]}" in str(e), str(e)
            assert not w.is_success() and w.exception() is not None
            # everything queued behind it fails as well, at once
            t0 = time.time()
            for q in works:
                try:
                    q.wait()
                except RuntimeError:
                    pass
                else:
                    raise AssertionError("an operation behind the failure succeeded")
            assert time.time() - t0 < 1.0
            # and so does the next call
            try:
                dist.all_reduce(torch.ones(3))
            except RuntimeError as e2:
                assert f"rank {victim}" in str(e2), str(e2)
            else:
                raise AssertionError("a call after the failure succeeded")
            dist.destroy_process_group()
            return
    raise AssertionError("no error")


def mismatch(rank, size):
    shape = 11 if rank == 1 else 10
    errors = []
    for t in (torch.ones(shape), torch.ones(10)):
        try:
            dist.all_reduce(t)
        except RuntimeError as e:
            errors.append(str(e))
            break
    assert errors, f"rank {rank}: a mismatched all_reduce went through"
    assert "Mismatched operation" in errors[0] and "count=11" in errors[0] and "count=10" in errors[0], errors[0]
    dist.barrier() if False else None
    t0 = time.time()
    dist.destroy_process_group()
    assert time.time() - t0 < 2.0


def batch_mismatch(rank, size):
    """A receive of a batch_isend_irecv that fails fails the batch's Work
    (the only one torch hands back), naming the mismatch; its buffer is
    untouched. With 3 ranks rank 0's batch also sends to rank 2, which
    gets its data or, when the mismatch's report reaches it first, an error
    that names it: never success without the data."""
    got = torch.full((20,), -1.0)
    if rank == 0:
        ops = [dist.P2POp(dist.irecv, got, 1)]
        if size > 2:
            ops.append(dist.P2POp(dist.isend, torch.full((5,), 2.0), 2))
    elif rank == 1:
        ops = [dist.P2POp(dist.isend, torch.ones(10), 0)]
    else:
        got = torch.full((5,), -1.0)
        ops = [dist.P2POp(dist.irecv, got, 0)]
    error = None
    try:
        for w in dist.batch_isend_irecv(ops):
            w.wait()
    except RuntimeError as e:
        error = str(e)
    if rank == 0:
        assert error and "Mismatched operation" in error and "count=20" in error, f"rank 0: {error}"
        assert torch.equal(got, torch.full((20,), -1.0)), "rank 0: the refused receive wrote its buffer"
    elif rank == 1:
        assert error is None, f"rank 1: {error}"
    elif error is None:
        assert torch.equal(got, torch.full((5,), 2.0)), f"rank 2: success, but {got.tolist()}"
    else:
        assert "Mismatched operation" in error, f"rank 2: {error}"
    t = torch.ones(1)
    dist.all_reduce(t)  # the group still works
    assert t.item() == size


def stalled(rank, size, logdir):
    # The group's 5 s timeout holds (CHORUS_TIMEOUT is 600 s); the log gets the flight recorder.
    log = os.path.join(logdir, f"rank{rank}.log")
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    os.dup2(fd, 2)
    everyone = pids()
    t = torch.ones(8)
    dist.all_reduce(t)
    if rank == 1:
        time.sleep(8)  # in no call
        try:
            dist.all_reduce(t)
        except RuntimeError:
            pass  # rank 0 gave up on the group: this call must fail too, not hang
        else:
            raise AssertionError("rank 1's late call succeeded")
        return None
    t0 = time.time()
    try:
        dist.all_reduce(t)
    except RuntimeError as e:
        took = time.time() - t0
        text = str(e)
    else:
        raise AssertionError("the all_reduce did not time out")
    assert 3.5 <= took <= 5.5, f"timed out after {took:.2f} s with a 5 s group timeout"
    assert re.search(" (Timed out|closed|timeout) ", text), text  # the words torch's own tests look for
    assert "timed out after 5 s" in text and f"rank 1 (host" in text and f"pid {everyone[1]})" in text, text
    assert "is in no call" in text, text
    os.fsync(2)
    dump = open(log).read()
    assert "flight recorder of group" in dump and "AllReduce" in dump and "started" in dump, dump[-2000:]
    assert isinstance(sys.modules["torch"].distributed.DistBackendError, type)
    return took


def stalled_new_group(rank, size):
    # new_group over every rank with a 2 s timeout (the world's is 60 s):
    # the ranks that call it give up at that timeout, naming the one that
    # never came, instead of waiting for it.
    dist.barrier()
    if rank == size - 1:
        time.sleep(5)  # in no call
        try:
            dist.new_group(list(range(size)), timeout=datetime.timedelta(seconds=2))
        except RuntimeError:
            return None  # the others gave up: this must fail too, not hang
        raise AssertionError("the late rank's new_group succeeded")
    t0 = time.time()
    try:
        dist.new_group(list(range(size)), timeout=datetime.timedelta(seconds=2))
    except RuntimeError as e:
        took, text = time.time() - t0, str(e)
    else:
        raise AssertionError("new_group without one of its ranks succeeded")
    assert 1.5 <= took <= 3.0, f"new_group gave up after {took:.2f} s with a 2 s timeout"
    assert f"rank {size - 1}" in text, text
    # the group it was made from failed with it, as NCCL's parent of a
    # nonblocking split that failed: its next call says why, at once
    try:
        dist.all_reduce(torch.ones(2))
    except RuntimeError as e:
        assert re.search(r"ncclComm(Split|Shrink) of it failed", str(e)) and f"rank {size - 1}" in str(e), str(e)
    else:
        raise AssertionError("the default group worked after a new_group made from it failed")
    return took


def stalled_subgroup(rank, size):
    # A subgroup of global ranks 0 and 2 whose rank 1 (global 2) stalls past
    # its 2 s timeout: the error numbers ranks within the group, and says
    # which global ranks those are.
    group = dist.new_group([0, 2], timeout=datetime.timedelta(seconds=2))
    if rank == 1:
        return None
    if rank == 2:
        time.sleep(4)  # in no call
        return None
    try:
        dist.all_reduce(torch.ones(2), group=group)
    except RuntimeError as e:
        text = str(e)
    else:
        raise AssertionError("an all_reduce without its peer succeeded")
    assert "rank 1 (host" in text and "0 is global 0, 1 is global 2" in text, text
    return None


def late_init(rank, size):
    # init_process_group with a 2 s timeout, the last rank 4 s late: the
    # others give up at the timeout naming it, and it learns on arrival that
    # they gave up (instead of finding the rendezvous gone).
    # (file://: env:// makes rank 0's TCPStore wait for every rank first,
    # and that store's timeout would speak before chorus's)
    path = os.path.join(tempfile.gettempdir(), f"chorus_late_init_{os.environ['CHORUS_TEST_PORT']}")
    late = rank == size - 1
    if late:
        time.sleep(4)
    t0 = time.time()
    try:
        dist.init_process_group("chorus", init_method=f"file://{path}", rank=rank, world_size=size,
                                timeout=datetime.timedelta(seconds=2))
    except RuntimeError as e:
        took, text = time.time() - t0, str(e)
    else:
        raise AssertionError("init without one of the ranks succeeded")
    if late:
        assert "gave up waiting for this one" in text, text
        if os.path.exists(path):
            os.remove(path)
        return None
    assert 1.5 <= took <= 3.5, f"init gave up after {took:.2f} s with a 2 s timeout"
    assert f"rank {size - 1} never came" in text, text
    time.sleep(3.5)  # rank 0 serves the store until the late rank has looked
    return took


def main():
    def kill_case(fn, n):
        with tempfile.TemporaryDirectory() as d:
            res = harness.run(n, fn, os.path.join(d, "death"), allow_fail=(n - 1 if fn is killed_in_training else 1,),
                              deadline=60)
            print(f"  {fn.__name__} on {n} ranks: errors {[round(r, 3) for r in res if isinstance(r, float)]} s after the death")

    def stall_case():
        with tempfile.TemporaryDirectory() as d:
            res = harness.run(2, stalled, d, pg_timeout=5, deadline=60)
            print(f"  stalled rank: timed out after {res[0]:.2f} s")

    cases = {
        "killed_in_training": lambda: [kill_case(killed_in_training, n) for n in (2, 3)],
        "killed_async": lambda: [kill_case(killed_async, n) for n in (2, 3)],
        "mismatch": lambda: [harness.run(n, mismatch) for n in (2, 3)],
        "batch_mismatch": lambda: [harness.run(n, batch_mismatch) for n in (2, 3)],
        "stalled": stall_case,
        "stalled_new_group": lambda: harness.run(3, stalled_new_group, pg_timeout=60, deadline=60),
        "stalled_subgroup": lambda: harness.run(3, stalled_subgroup, pg_timeout=60, deadline=60),
        "late_init": lambda: harness.run(3, late_init, backend=None, deadline=60),
    }
    harness.main(cases)


if __name__ == "__main__":
    main()
