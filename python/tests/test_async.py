"""Asynchronous semantics: Works return at once, run in issue order in the
background, complete their Futures (which comm hooks chain on), and can be
waited for in any order: python3 test_async.py [case ...]."""
import datetime
import sys
import time

import torch
import torch.distributed as dist

import harness


def many_in_flight(rank, size):
    sizes = [1, 5, 1000, 70001, 1 << 20] * 4
    ts = [torch.full((n,), float(rank + k)) for k, n in enumerate(sizes)]
    works = [dist.all_reduce(t, async_op=True) for t in ts]
    for k in reversed(range(len(works))):  # waited for in the other order
        works[k].wait()
        want = float(size * k + size * (size - 1) // 2)
        assert torch.all(ts[k] == want), f"op {k}: {ts[k][:3]} want {want}"
        assert works[k].is_completed() and works[k].is_success()
        assert works[k].exception() is None
    for k, w in enumerate(works):
        out = w.get_future().value()
        assert out[0] is ts[k] or torch.equal(out[0], ts[k]), "the future's value is the output tensor"
    assert works[-1].result()[0].data_ptr() == ts[-1].data_ptr()


def futures(rank, size):
    t = torch.ones(1000) * (rank + 1)
    fut = dist.all_reduce(t, async_op=True).get_future()
    doubled = fut.then(lambda f: f.value()[0] * 2)
    s = size * (size + 1) // 2
    assert torch.all(doubled.wait() == 2 * s)
    # torch.futures.wait_all over several
    ts = [torch.ones(7) for _ in range(5)]
    futs = [dist.all_reduce(x, async_op=True).get_future() for x in ts]
    torch.futures.wait_all(futs)
    assert all(torch.all(x == size) for x in ts)


def background(rank, size):
    # Nobody waits: the stream's worker runs it, while Python holds the GIL elsewhere.
    t = torch.ones(4 << 20)
    w = dist.all_reduce(t, async_op=True)
    t0 = time.time()
    while not w.is_completed():
        sum(range(1000))  # busy in Python, holding the GIL
        assert time.time() - t0 < 10, "an async all_reduce nobody waited for did not complete"
    assert torch.all(t == size)
    # isend with nobody waiting still goes out (held back at most briefly)
    if size > 1:
        if rank == 0:
            s = dist.isend(torch.arange(10.0), 1)
            t0 = time.time()
            while not s.is_completed():
                assert time.time() - t0 < 10
                time.sleep(0.001)
        elif rank == 1:
            r = torch.zeros(10)
            dist.recv(r, 0)
            assert torch.equal(r, torch.arange(10.0))
    dist.barrier()


def wait_timeout(rank, size):
    if size < 2:
        return
    t = torch.ones(10)
    if rank == 0:
        w = dist.all_reduce(t, async_op=True)
        t0 = time.time()
        try:
            w.wait(timeout=datetime.timedelta(milliseconds=200))
        except RuntimeError as e:
            took = time.time() - t0
            assert "timed out after 200 ms" in str(e), str(e)
            assert took < 2, f"wait(timeout=200 ms) raised after {took:.2f} s"
        else:
            raise AssertionError("wait(timeout) returned while a peer had not called")
        dist.barrier()  # behind the all_reduce, which now completes
        w.wait()
        assert torch.all(t == size)
    else:
        time.sleep(0.6)
        dist.all_reduce(t)
        dist.barrier()


def order(rank, size):
    # async and blocking calls interleaved keep issue order
    a, b, c = torch.ones(3), torch.ones(5) * 2, torch.ones(7) * 3
    wa = dist.all_reduce(a, async_op=True)
    dist.broadcast(b, src=size - 1)
    wc = dist.all_reduce(c, op=dist.ReduceOp.MAX, async_op=True)
    wc.wait()
    wa.wait()
    assert torch.all(a == size) and torch.all(b == 2) and torch.all(c == 3)
    assert wa.is_completed() and wc.is_completed()


def flood(rank, size):
    # Many more operations in flight than a stream holds; callbacks that
    # block waiting for later operations (as PowerSGD's hook does) do not
    # stop the ones behind them.
    ts = [torch.full((64,), float(k)) for k in range(1200)]
    works = [dist.all_reduce(t, async_op=True) for t in ts]
    later = lambda k: works[min(k + 10, len(works) - 1)].get_future()  # noqa: E731
    futs = [w.get_future().then(lambda f, k=k: later(k).wait()) if k % 30 == 0 else w.get_future()
            for k, w in enumerate(works)]
    torch.futures.wait_all(futs)
    for k, t in enumerate(ts):
        assert torch.all(t == k * size), f"op {k}: {t[0]}"


def main():
    cases = {}
    for name, f in [("many_in_flight", many_in_flight), ("futures", futures), ("background", background),
                    ("wait_timeout", wait_timeout), ("order", order), ("flood", flood)]:
        cases[name] = lambda f=f: [harness.run(n, f) for n in (1, 2, 3)]
    harness.main(cases)


if __name__ == "__main__":
    main()
