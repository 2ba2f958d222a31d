"""Asynchronous semantics: Works return at once, run in issue order in the
background, complete their Futures (which comm hooks chain on), and can be
waited for in any order: python3 test_async.py [case ...]."""
import datetime
import re
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
            # torch's own tests look for " (Timed out|closed|timeout) " (gloo's and NCCL's words)
            assert "timeout after 200 ms" in str(e) and re.search(" (Timed out|closed|timeout) ", str(e)), str(e)
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


def temporaries(rank, size):
    # Inputs that nothing else holds stay alive until their operation has run.
    n = 1 << 16
    outs = [torch.zeros(size * n) for _ in range(4)]
    rs = [torch.zeros(n) for _ in range(4)]
    works = []
    for k in range(4):
        works.append(dist.all_gather_into_tensor(outs[k], torch.full((n,), float(rank + k)) * 1, async_op=True))
        works.append(dist.reduce_scatter_tensor(rs[k], torch.full((size * n,), float(k)) * 1, async_op=True))
    junk = [torch.full((n,), -9.0) for _ in range(64)]  # reuses freed memory, if any was freed
    for w in works:
        w.wait()
    for k in range(4):
        want = torch.cat([torch.full((n,), float(r + k)) for r in range(size)])
        assert torch.equal(outs[k], want), f"all_gather_into_tensor {k} read a freed input"
        assert torch.all(rs[k] == k * size), f"reduce_scatter_tensor {k} read a freed input"
    del junk


def released(rank, size):
    # Once an operation has finished and the caller holds neither its tensors
    # nor its Work, the memory is free at once, not at some later call
    # (memory held back made the allocator hand memory to the system and fault
    # it back on every DDP step), whichever way it was waited for.
    def storage(t):
        return t.untyped_storage()._weak_ref()

    calls = {
        "all_reduce": lambda t, a: dist.all_reduce(t, async_op=a),
        "broadcast": lambda t, a: dist.broadcast(t, 0, async_op=a),
        "reduce": lambda t, a: dist.reduce(t, 0, async_op=a),
        "all_gather_into_tensor": lambda t, a: dist.all_gather_into_tensor(torch.empty(size * t.numel()), t, async_op=a),
        "reduce_scatter_tensor": lambda t, a: dist.reduce_scatter_tensor(t[: t.numel() // size], t, async_op=a),
        "all_to_all_single": lambda t, a: dist.all_to_all_single(torch.empty_like(t), t, async_op=a),
    }
    for name, call in calls.items():
        for how in ("sync", "wait", "future", "completed"):
            t = torch.ones(size * 1024)
            ref = storage(t)
            w = call(t, how != "sync")
            if how == "wait":
                w.wait()
            elif how == "future":
                w.get_future().wait()
            elif how == "completed":
                while not w.is_completed():
                    time.sleep(0.001)
            del t, w
            # A completion thread that has just completed the future may hold the Work a moment longer.
            deadline = time.monotonic() + 2
            while not torch.UntypedStorage._expired(ref) and time.monotonic() < deadline:
                time.sleep(0.001)
            assert torch.UntypedStorage._expired(ref), f"{name} ({how}): its tensor outlived the operation and its Work"
    dist.barrier()


def callback_waits_on_later(rank, size):
    # Waiting for w2 runs w1 and w2 on this thread; w1's callback waits for
    # w2's future, which must not be queued behind it.
    a, b = torch.ones(8), torch.ones(8)
    w1 = dist.all_reduce(a, async_op=True)
    w2 = dist.all_reduce(b, async_op=True)
    f = w1.get_future().then(lambda _: w2.get_future().wait()[0] * 3)
    w2.wait()
    assert torch.all(f.wait() == 3 * size)


def coalescing_block(rank, size):
    # As with torch's NCCL backend: waiting for an operation inside the block
    # returns at once (it runs with the block), and so does a blocking call
    # there, which torch waits for itself; the block then runs them all.
    t = torch.full((5,), float(rank))
    with dist._coalescing_manager(device=torch.device("cpu"), async_ops=True) as cm:
        w = dist.broadcast(t, src=0, async_op=True)
        w.wait()
        assert not w.is_completed()
    cm.wait()
    assert torch.all(t == 0)
    w.wait()
    assert w.is_completed()
    u = torch.full((3,), float(rank + 1))
    with dist._coalescing_manager(device=torch.device("cpu")):
        dist.broadcast(u, src=size - 1)  # blocking: torch calls wait() on its Work inside the block
    assert torch.all(u == size), u
    # The group is out of the block: a plain call, a barrier and another block run.
    v = torch.ones(2)
    dist.all_reduce(v)
    assert torch.all(v == size), v
    dist.barrier()
    with dist._coalescing_manager(device=torch.device("cpu"), async_ops=True) as cm:
        dist.all_reduce(v, async_op=True)
    cm.wait()
    assert torch.all(v == size * size), v


def refused_in_block(rank, size):
    # A call chorus refuses inside a coalescing block (a receive into an
    # expanded view, inside batch_isend_irecv's block) raises, on every rank,
    # and its exception leaves torch's _coalescing_manager without ending
    # the block: chorus ends it itself, so the calls after it run as they
    # come. They had joined a block nobody would end: returned at once with
    # their buffers untouched (broadcast, send/recv, all_gather, barrier).
    # torch's own record of the block stays behind (the manager has no
    # finally), so torch keeps all_reduce's fast path to itself until the
    # next block: only calls without that path are checked here.
    if size == 1:
        return
    ops = [dist.P2POp(dist.isend, torch.ones(4), (rank + 1) % size),
           dist.P2POp(dist.irecv, torch.zeros(1).expand(4), (rank - 1) % size)]
    try:
        dist.batch_isend_irecv(ops)
        raise AssertionError("a receive into an expanded view was taken")
    except RuntimeError as e:
        assert "share memory" in str(e), e
    b = torch.full((2,), float(rank + 10))
    dist.broadcast(b, src=size - 1)
    assert torch.all(b == size + 9), b
    got = torch.zeros(2)
    if rank == 0:
        dist.send(torch.full((2,), 5.0), 1)
    elif rank == 1:
        dist.recv(got, 0)
        assert torch.all(got == 5), got
    out = [torch.zeros(1) for _ in range(size)]
    dist.all_gather(out, torch.full((1,), float(rank)))
    assert [o.item() for o in out] == list(range(size)), out
    dist.barrier()
    # A caller that catches the refusal and goes on: the block ended there,
    # and its end says so on every rank (it had said "endCoalescing without
    # startCoalescing", the broadcast before the refusal silently dropped).
    a = torch.full((2,), float(rank))
    try:
        with dist._coalescing_manager(device=torch.device("cpu"), async_ops=True):
            dist.broadcast(a, src=0)
            try:
                dist.broadcast(torch.zeros(1).expand(4), src=0)
            except RuntimeError:
                pass
        raise AssertionError("a block with a refused call ended without an error")
    except RuntimeError as e:
        assert "block ended there" in str(e), e
    dist.barrier()


def chained(rank, size):
    """An operation issued right behind another, with no wait between, reads
    what the first one wrote, also where the backend stages its input in a
    buffer of its own (list forms, non-contiguous tensors, input aliasing
    the output): the staging copy runs in stream order, not at the call."""
    n = 4099
    total = torch.arange(float(size * n))
    reduced = size * total + size * (size - 1) // 2  # what all_reduce makes of total + rank
    mine = slice(rank * n, (rank + 1) * n)

    def check(what, got, want):
        assert torch.equal(got, want), f"{what}: got {got.flatten()[:4].tolist()}... want {want.flatten()[:4].tolist()}..."

    x, o = total + rank, torch.zeros(n)
    works = [dist.all_reduce(x, async_op=True), dist.reduce_scatter(o, list(x.chunk(size)), async_op=True)]
    for w in works:
        w.wait()
    check("all_reduce then reduce_scatter of its output", o, size * reduced[mine])
    x, o = total + rank, torch.zeros(n)
    works = [dist.all_reduce(x, async_op=True),
             dist.scatter(o, list(x.chunk(size)) if rank == 0 else None, src=0, async_op=True)]
    for w in works:
        w.wait()
    check("all_reduce then scatter of its output", o, reduced[mine])
    base = (total + rank).view(size, n)
    works = [dist.all_reduce(base.t(), async_op=True) for _ in range(2)]  # non-contiguous, twice
    for w in works:
        w.wait()
    check("two all_reduces of a transposed view", base, (size * reduced).view(size, n))
    base = (total + rank).view(size, n)
    outs = [torch.zeros(n, size) for _ in range(size)]
    works = [dist.all_reduce(base, async_op=True), dist.all_gather(outs, base.t(), async_op=True)]
    for w in works:
        w.wait()
    for k in range(size):
        check(f"all_reduce then all_gather of its transposed output, block {k}", outs[k], reduced.view(size, n).t())
    x = total + rank
    works = [dist.all_reduce(x, async_op=True), dist.all_to_all_single(x, x, async_op=True)]  # in place
    for w in works:
        w.wait()
    check("all_reduce then in-place all_to_all_single", x, reduced[mine].repeat(size))


def inference_mode(rank, size):
    """Staged inputs and outputs are copied on the stream's thread with the
    issuing thread's torch state: under torch.inference_mode() the staging
    buffers are inference tensors, which torch lets only inference mode
    write."""
    with torch.inference_mode():
        ins = [torch.full((4,), float(rank + i)) for i in range(size)]
        out = torch.empty(4)
        base = torch.arange(12.0).view(3, 4) + rank
        works = [dist.reduce_scatter(out, ins, async_op=True), dist.all_reduce(base.t(), async_op=True)]
        time.sleep(0.3)  # the stream's own thread runs them meanwhile
        for w in works:
            w.wait()
        s = size * (size - 1) // 2
        assert torch.equal(out, torch.full((4,), float(s + size * rank))), out
        assert torch.equal(base, (size * torch.arange(12.0) + s).view(3, 4)), base


def p2p_many_each_way(rank, size):
    # 130 isends to the next rank, then 130 irecvs from the previous one:
    # no bound on works in flight may wait for a send whose receive the
    # peer has not posted yet (it waits the same way).
    if size == 1:
        return
    k, nxt, prv = 130, (rank + 1) % size, (rank - 1) % size
    outs = [torch.empty(100) for _ in range(k)]
    works = [dist.isend(torch.full((100,), float(1000 * rank + i)), dst=nxt) for i in range(k)]
    works += [dist.irecv(o, src=prv) for o in outs]
    for w in works:
        w.wait()
    for i, o in enumerate(outs):
        assert torch.equal(o, torch.full((100,), float(1000 * prv + i))), f"message {i}: {o[:3]}"


def recv_across_many_collectives(rank, size):
    # An irecv posted before 130 async all_reduces, its send issued after
    # the sender waited for its own: the receiver must not wait for the
    # irecv to issue the rest.
    if size == 1:
        return
    ts = [torch.full((4,), float(i)) for i in range(130)]
    got = torch.zeros(3)
    recv = dist.irecv(got, src=1) if rank == 0 else None
    works = [dist.all_reduce(t, async_op=True) for t in ts]
    for w in works:
        w.wait()
    if rank == 1:
        dist.send(torch.tensor([7.0, 8.0, 9.0]), dst=0)
    if recv:
        recv.wait()
        assert torch.equal(got, torch.tensor([7.0, 8.0, 9.0])), got
    for i, t in enumerate(ts):
        assert torch.equal(t, torch.full((4,), float(i * size))), f"all_reduce {i}: {t}"


def past_the_cap(rank, size):
    # 300 async all_reduces (past the 120 a group keeps on its stream) and
    # then a call the peers make before theirs: a collective of another
    # group, a receive, a barrier of a subgroup. The rest wait in the
    # group's backlog: the call returns at once, as gloo's queue takes any
    # number (issuing the 121st had waited for the first, which waited for
    # peers that were still in the call this rank had not reached).
    if size == 1:
        return
    other = dist.new_group(list(range(size)))
    for mode in ("group", "recv", "barrier"):
        ts = [torch.full((3,), float(i + rank)) for i in range(300)]
        big = torch.full((1 << 20,), float(rank))

        def before():
            if mode == "group":
                x = torch.ones(2)
                dist.all_reduce(x, group=other)
                assert torch.equal(x, torch.full((2,), float(size))), x
            elif mode == "recv" and rank == 0:
                dist.recv(big, src=1)
                assert torch.equal(big, torch.full((1 << 20,), 1.0)), big[:3]
            elif mode == "recv" and rank == 1:
                dist.send(big, dst=0)
            elif mode == "barrier":
                dist.barrier(group=other)

        if rank == 0:
            works = [dist.all_reduce(t, async_op=True) for t in ts]
            before()
        else:
            before()
            works = [dist.all_reduce(t, async_op=True) for t in ts]
        futs = [w.get_future() for w in works]
        torch.futures.wait_all(futs[-5:])  # futures alone, no Work.wait: the backlog goes on by itself
        for i, (t, w) in enumerate(zip(ts, works)):
            w.wait()
            want = float(size * i + size * (size - 1) // 2)
            assert torch.equal(t, torch.full((3,), want)), f"{mode}: all_reduce {i}: {t} want {want}"
    # Held back (rank 1 comes 1 s late): staged inputs under inference mode
    # (the launch's torch state, not the issuing thread's), then a wait on
    # one inside a coalescing block (the block's collectives are not on the
    # stream yet: not counted), then new_group (its split waits for the
    # peers, who wait for these).
    if rank == 1:
        time.sleep(1)
    with torch.inference_mode():
        bases = [torch.arange(12.0).view(3, 4) + rank + i for i in range(130)]
        works = [dist.all_reduce(b.t(), async_op=True) for b in bases]
        xs = [torch.ones(2) for _ in range(125)]
        with dist.distributed_c10d._coalescing_manager(device=torch.device("cpu"), async_ops=True) as cm:
            for x in xs:
                dist.broadcast(x, src=0, async_op=True)
            works[-1].wait(datetime.timedelta(seconds=15))
        cm.wait()
        for i, (b, w) in enumerate(zip(bases, works)):
            w.wait()
            want = (size * torch.arange(12.0) + size * i + size * (size - 1) // 2).view(3, 4)
            assert torch.equal(b, want), f"inference mode, all_reduce {i}: {b}"
    works = [dist.all_reduce(torch.ones(1), async_op=True) for _ in range(130 if rank == 0 else 0)]
    if rank != 0:
        works = [dist.all_reduce(torch.ones(1), async_op=True) for _ in range(130)]
        for w in works:
            w.wait()
    dist.new_group(list(range(size)))
    for w in works:
        w.wait()
    # A group shut down with launches in its backlog runs them first.
    g = dist.new_group(list(range(size)))
    ts = [torch.full((2,), 1.0) for _ in range(250)]
    works = [dist.all_reduce(t, group=g, async_op=True) for t in ts]
    dist.destroy_process_group(g)
    for i, (t, w) in enumerate(zip(ts, works)):
        assert w.is_completed() and torch.equal(t, torch.full((2,), float(size))), f"after shutdown: {i}: {t}"


def threads_retire(rank, size):
    # A burst of completions may start threads (a busy one might be a
    # callback waiting for what is queued behind it); idle ones go again.
    import os

    def threads():
        return len(os.listdir("/proc/self/task"))

    before = threads()
    for i in range(3000):
        dist.all_reduce(torch.full((64, 3), float(i)).t(), async_op=True)  # dropped at once
    dist.barrier()
    time.sleep(2.5)
    assert threads() <= before + 6, f"{threads()} threads after a burst, {before} before"


def main():
    cases = {}
    for name, f in [("many_in_flight", many_in_flight), ("futures", futures), ("background", background),
                    ("wait_timeout", wait_timeout), ("order", order), ("flood", flood), ("temporaries", temporaries),
                    ("callback_waits_on_later", callback_waits_on_later), ("coalescing_block", coalescing_block), ("released", released),
                    ("refused_in_block", refused_in_block),
                    ("chained", chained), ("inference_mode", inference_mode), ("threads_retire", threads_retire)]:
        cases[name] = lambda f=f: [harness.run(n, f) for n in (1, 2, 3)]
    # A wait between the ranks that never ends fails in 10 s, not the default minute.
    for name, f in [("p2p_many_each_way", p2p_many_each_way),
                    ("recv_across_many_collectives", recv_across_many_collectives), ("past_the_cap", past_the_cap)]:
        cases[name] = lambda f=f: [harness.run(n, f, pg_timeout=10) for n in (2, 3)]
    harness.main(cases)


if __name__ == "__main__":
    main()
