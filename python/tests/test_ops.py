"""Every torch.distributed operation x dtype x reduction on 1-4 ranks,
checked against results each rank computes on its own from every rank's
(deterministic) inputs: python3 test_ops.py NRANKS [case ...]."""
import sys

import time

import torch
import torch.distributed as dist

import harness

DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int8, torch.uint8, torch.int32,
          torch.int64, torch.bool]
FLOATS = {torch.float32, torch.float64, torch.float16, torch.bfloat16}
SIZES = [0, 1, 7, 1000, 70001]  # 70001 floats: past the one-hop size, through the ring
OPS = ["SUM", "AVG", "PRODUCT", "MIN", "MAX", "PREMUL_SUM", "BAND", "BOR", "BXOR"]
BITWISE = {"BAND": torch.bitwise_and, "BOR": torch.bitwise_or, "BXOR": torch.bitwise_xor}


def value(rank, n, dtype, op="SUM", salt=0):
    """Rank's input: small integers, exact in every dtype, products that cannot overflow int8."""
    i = torch.arange(n, dtype=torch.int64)
    v = (i * 7 + rank * 3 + salt) % 5 + 1
    if op == "PRODUCT":
        v = v % 2 + 1
    if dtype == torch.bool:
        return (v % 2 == 0) if op != "PRODUCT" else (v != 3)
    return v.to(dtype)


def reduce_ref(values, op, dtype, size):
    """What the reduction must give, computed here in wide types."""
    if op in BITWISE:  # gloo's BAND, BOR, BXOR: bitwise, bool's as its 0 and 1
        r = values[0].clone()
        for v in values[1:]:
            r = BITWISE[op](r, v)
        return r
    if dtype == torch.bool:
        s = torch.stack([v.to(torch.int64) for v in values])
        r = {"SUM": s.amax(0), "MAX": s.amax(0), "PRODUCT": s.amin(0), "MIN": s.amin(0)}[op]
        return r.to(torch.bool)
    wide = torch.float64 if dtype in FLOATS else torch.int64
    s = torch.stack([v.to(wide) for v in values])
    if op == "SUM":
        r = s.sum(0)
    elif op == "PRODUCT":
        r = s.prod(0)
    elif op == "MIN":
        r = s.amin(0)
    elif op == "MAX":
        r = s.amax(0)
    elif op == "AVG":
        r = s.sum(0) / size if dtype in FLOATS else torch.div(s.sum(0), size, rounding_mode="floor")
    elif op == "PREMUL_SUM":
        r = (s * 0.5).sum(0)
    return r.to(dtype)


def redop(op):
    return dist._make_nccl_premul_sum(0.5) if op == "PREMUL_SUM" else getattr(dist.ReduceOp, op)


def applies(op, dtype):
    if op in BITWISE:
        return dtype not in FLOATS
    if dtype == torch.bool:
        return op in ("SUM", "PRODUCT", "MIN", "MAX")
    if op == "PREMUL_SUM":
        return dtype in FLOATS
    return True


def check(got, want, what):
    if got.dtype in (torch.float16, torch.bfloat16):
        torch.testing.assert_close(got, want, rtol=1e-2, atol=1e-2, msg=lambda m: f"{what}: {m}")
    elif got.dtype in FLOATS:
        torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6, msg=lambda m: f"{what}: {m}")
    elif not torch.equal(got, want):
        bad = (got != want).nonzero()[:5].flatten().tolist()
        raise AssertionError(f"{what}: wrong at {bad}: got {got.flatten()[bad].tolist()} want {want.flatten()[bad].tolist()}")


def all_reduce(rank, size):
    for dtype in DTYPES:
        for op in OPS:
            if not applies(op, dtype):
                continue
            for n in SIZES:
                t = value(rank, n, dtype, op)
                dist.all_reduce(t, op=redop(op))
                check(t, reduce_ref([value(r, n, dtype, op) for r in range(size)], op, dtype, size),
                      f"all_reduce {op} {dtype} n={n}")
    # Non-contiguous (a transposed view): made contiguous and copied back; the rest untouched.
    base = torch.full((6, 5), -1.0)
    view = base[:, 1:4].t()  # 3 x 6, strided
    view.copy_(torch.arange(18.0).reshape(3, 6) + rank)
    dist.all_reduce(view)
    check(view, (torch.arange(18.0).reshape(3, 6) * size + sum(range(size))), "all_reduce of a strided view")
    check(base[:, 0], torch.full((6,), -1.0), "column outside the view")
    check(base[:, 4], torch.full((6,), -1.0), "column outside the view")
    # complex: sums as pairs of reals
    c = torch.complex(torch.arange(5.0) + rank, -torch.arange(5.0))
    dist.all_reduce(c)
    check(torch.view_as_real(c), torch.view_as_real(torch.complex(torch.arange(5.0) * size + sum(range(size)),
                                                                  -torch.arange(5.0) * size)), "complex all_reduce")


def avg_unbiased(rank, size):
    """AVG of bf16 / fp16 is the mean without a bias of its own: 1/n is not
    rounded to the type first (bf16's 1/3 is 0.33398, which made every
    3-rank average 0.2% too large; gloo's is unbiased)."""
    inputs = [torch.rand(20000, generator=torch.Generator().manual_seed(1234 + r)) + 1 for r in range(size)]
    for dtype, most in ((torch.bfloat16, 5e-4), (torch.float16, 5e-5)):
        t = inputs[rank].to(dtype)
        dist.all_reduce(t, op=dist.ReduceOp.AVG)
        want = torch.stack([x.to(dtype).double() for x in inputs]).mean(0)
        bias = ((t.double() - want) / want).mean().item()
        assert abs(bias) < most, f"AVG of {dtype} on {size} ranks: mean relative error {bias:.2e} (at most {most:.0e})"


def refused(rank, size):
    t = torch.ones(4, dtype=torch.float32)
    for op in ("BAND", "BOR", "BXOR"):  # as gloo: bitwise reductions of integers and bools only
        try:
            dist.all_reduce(t, op=getattr(dist.ReduceOp, op))
        except RuntimeError as e:
            assert f"ReduceOp.{op} cannot reduce Float tensors" in str(e), str(e)
        else:
            raise AssertionError(f"ReduceOp.{op} of floats was accepted")
    try:
        dist.all_reduce(torch.ones(3, dtype=torch.int16))
    except RuntimeError as e:
        assert "cannot reduce" in str(e) and "Short" in str(e), str(e)
    else:
        raise AssertionError("an int16 reduction was accepted")
    try:
        dist.all_gather([torch.zeros(2)] * (size + 1), torch.ones(2))
    except (RuntimeError, ValueError) as e:
        assert "tensors" in str(e), str(e)
    else:
        raise AssertionError("a wrong output list was accepted")
    try:
        dist.broadcast(torch.ones(2), src=size)
    except (RuntimeError, ValueError) as e:
        assert "rank" in str(e).lower(), str(e)
    else:
        raise AssertionError("an out-of-range root was accepted")
    # An output whose elements share memory cannot take a result each:
    # refused before anything runs (it used to fail copying back after).
    for what, call in [("all_reduce", lambda: dist.all_reduce(torch.ones(1).expand(4))),
                       ("broadcast", lambda: dist.broadcast(torch.ones(1).expand(3), src=0)),
                       ("all_gather", lambda: dist.all_gather([torch.zeros(1).expand(2)] * size, torch.ones(2)))]:
        try:
            call()
        except RuntimeError as e:
            assert "share memory" in str(e), f"{what}: {e}"
        else:
            raise AssertionError(f"{what} into an expanded tensor was accepted")
    # A complex PREMUL_SUM factor would lose its imaginary part (torch's NCCL backend refuses it too).
    try:
        dist.all_reduce(torch.ones(2, dtype=torch.complex64), op=dist._make_nccl_premul_sum(torch.tensor([1j])))
    except RuntimeError as e:
        assert "factor is complex" in str(e), str(e)
    else:
        raise AssertionError("a complex PREMUL_SUM factor was accepted")
    # After refusals the group still works (nothing was issued).
    t = torch.ones(3)
    dist.all_reduce(t)
    check(t, torch.full((3,), float(size)), "all_reduce after refused calls")


def rooted(rank, size):
    for dtype in DTYPES:
        for root in range(size):
            for n in (0, 7, 70001):
                t = value(rank, n, dtype, salt=root)
                dist.broadcast(t, src=root)
                check(t, value(root, n, dtype, salt=root), f"broadcast {dtype} n={n} root={root}")
                for op in ("SUM", "MAX"):
                    t = value(rank, n, dtype, op, salt=root)
                    dist.reduce(t, dst=root, op=redop(op))
                    want = (reduce_ref([value(r, n, dtype, op, salt=root) for r in range(size)], op, dtype, size)
                            if rank == root else value(rank, n, dtype, op, salt=root))
                    check(t, want, f"reduce {op} {dtype} n={n} root={root} ({'root' if rank == root else 'non-root: unchanged'})")
                # gather / scatter (lists at the root)
                mine = value(rank, n, dtype, salt=5)
                outs = [torch.zeros(n, dtype=dtype) for _ in range(size)] if rank == root else None
                dist.gather(mine, outs, dst=root)
                if rank == root:
                    for r in range(size):
                        check(outs[r], value(r, n, dtype, salt=5), f"gather {dtype} n={n} root={root} from {r}")
                ins = [value(r, n, dtype, salt=9) for r in range(size)] if rank == root else None
                out = torch.zeros(n, dtype=dtype)
                dist.scatter(out, ins, src=root)
                check(out, value(rank, n, dtype, salt=9), f"scatter {dtype} n={n} root={root}")


def gathers(rank, size):
    for dtype in DTYPES:
        for n in SIZES:
            mine = value(rank, n, dtype, salt=1)
            every = [value(r, n, dtype, salt=1) for r in range(size)]
            outs = [torch.full((n,), 1, dtype=dtype) for _ in range(size)]
            dist.all_gather(outs, mine)
            for r in range(size):
                check(outs[r], every[r], f"all_gather {dtype} n={n} from {r}")
            flat = torch.zeros(size * n, dtype=dtype)
            dist.all_gather_into_tensor(flat, mine)
            check(flat, torch.cat(every), f"all_gather_into_tensor {dtype} n={n}")
            stacked = torch.zeros(size, n, dtype=dtype)
            dist.all_gather_into_tensor(stacked, mine)
            check(stacked, torch.stack(every), f"all_gather_into_tensor (stacked) {dtype} n={n}")
            # in place (FSDP's way): the input is this rank's block of the output
            flat = torch.zeros(size * n, dtype=dtype)
            flat[rank * n:(rank + 1) * n] = mine
            dist.all_gather_into_tensor(flat, flat[rank * n:(rank + 1) * n])
            check(flat, torch.cat(every), f"all_gather_into_tensor in place {dtype} n={n}")
            for op in ("SUM", "MIN", "AVG", "BXOR"):
                if not applies(op, dtype):
                    continue
                blocks = [value(rank, n, dtype, op, salt=b) for b in range(size)]
                want = reduce_ref([value(r, n, dtype, op, salt=rank) for r in range(size)], op, dtype, size)
                out = torch.zeros(n, dtype=dtype)
                dist.reduce_scatter(out, blocks, op=redop(op))
                check(out, want, f"reduce_scatter {op} {dtype} n={n}")
                out = torch.zeros(n, dtype=dtype)
                dist.reduce_scatter_tensor(out, torch.cat(blocks), op=redop(op))
                check(out, want, f"reduce_scatter_tensor {op} {dtype} n={n}")
                whole = torch.cat(blocks)  # in place: the output is this rank's block of the input
                dist.reduce_scatter_tensor(whole[rank * n:(rank + 1) * n], whole, op=redop(op))
                check(whole[rank * n:(rank + 1) * n], want, f"reduce_scatter_tensor in place {op} {dtype} n={n}")


def uneven_lists(rank, size):
    """The list forms with a block size per rank (torch's NCCL backend runs
    them as a group of broadcasts / reduces): rank r's block has
    base + 3 r elements, a strided view for an output; a rank whose own
    block disagrees with its other tensor gets an error naming it."""
    for dtype in (torch.float32, torch.int32, torch.bfloat16):
        for base in (0, 5, 40000):
            n = [base + 3 * r for r in range(size)]
            mine = value(rank, n[rank], dtype, salt=2)
            rows = torch.full((size, max(n) * 2 + 1), 9, dtype=dtype)
            outs = [rows[r, : 2 * n[r]: 2] if r % 2 else torch.full((n[r],), 9, dtype=dtype) for r in range(size)]
            dist.all_gather(outs, mine)
            for r in range(size):
                check(outs[r], value(r, n[r], dtype, salt=2), f"uneven all_gather {dtype} base={base} from {r}")
            if size > 1:
                check(rows[1, 1: 2 * n[1]: 2], torch.full((n[1],), 9, dtype=dtype),
                      f"uneven all_gather {dtype}: the strided output's gaps")
            for op in ("SUM", "MAX", "PREMUL_SUM", "BOR"):
                if not applies(op, dtype):
                    continue
                blocks = [value(rank, n[p], dtype, op, salt=p) for p in range(size)]
                want = reduce_ref([value(r, n[rank], dtype, op, salt=rank) for r in range(size)], op, dtype, size)
                out = torch.full((n[rank],), 9, dtype=dtype)
                dist.reduce_scatter(out, blocks, op=redop(op))
                check(out, want, f"uneven reduce_scatter {op} {dtype} base={base}")
                for p in range(size):
                    check(blocks[p], value(rank, n[p], dtype, op, salt=p), f"uneven reduce_scatter's input {p}")
    if size > 1:
        # Blocks that share memory across indices: this rank's input is the
        # next rank's output block (all_gather), this rank's output is the
        # next rank's input block (reduce_scatter); every block still goes
        # as it was before the call.
        n = [1000 + 3 * r for r in range(size)]
        nxt = (rank + 1) % size
        buf = torch.zeros(max(n))
        mine = buf[: n[rank]]
        mine.copy_(value(rank, n[rank], torch.float32, salt=4))
        outs = [buf[: n[r]] if r == nxt else torch.zeros(n[r]) for r in range(size)]
        dist.all_gather(outs, mine)
        for r in range(size):
            check(outs[r], value(r, n[r], torch.float32, salt=4), f"uneven all_gather into the input's memory, from {r}")
        store = torch.zeros(size * 2 * max(n))
        offs = [p * 2 * max(n) for p in range(size)]  # room after each block: out overlaps the next rank's alone
        blocks = [store[offs[p]: offs[p] + n[p]] for p in range(size)]
        for p in range(size):
            blocks[p].copy_(value(rank, n[p], torch.float32, salt=p))
        out = store[offs[nxt]: offs[nxt] + n[rank]]
        dist.reduce_scatter(out, blocks)
        want = reduce_ref([value(r, n[rank], torch.float32, salt=rank) for r in range(size)], "SUM", torch.float32, size)
        check(out, want, "uneven reduce_scatter into another block's memory")
        n = [4 + r for r in range(size)]
        outs = [torch.zeros(n[r]) for r in range(size)]
        try:
            dist.all_gather(outs, torch.ones(n[rank] + 1))
            raise AssertionError("all_gather with this rank's output block unlike its input did not fail")
        except RuntimeError as e:
            assert "this rank's output tensor has" in str(e), str(e)


def coalesced(rank, size):
    # The coalescing manager (FSDP-style): one chorus group for many calls.
    ts = [value(rank, n, torch.float32) for n in (3, 1000, 70001)]
    with dist._coalescing_manager(async_ops=True) as cm:
        for t in ts:
            dist.all_reduce(t)
    cm.wait()
    for t, n in zip(ts, (3, 1000, 70001)):
        check(t, reduce_ref([value(r, n, torch.float32) for r in range(size)], "SUM", torch.float32, size),
              f"coalesced all_reduce n={n}")
    ins = [value(rank, n, torch.bfloat16, salt=2) for n in (5, 900)]
    outs = [torch.zeros(size * n, dtype=torch.bfloat16) for n in (5, 900)]
    with dist._coalescing_manager(async_ops=True) as cm:
        for o, i in zip(outs, ins):
            dist.all_gather_into_tensor(o, i)
    cm.wait()
    for o, n in zip(outs, (5, 900)):
        check(o, torch.cat([value(r, n, torch.bfloat16, salt=2) for r in range(size)]), f"coalesced all_gather n={n}")
    blocks = [torch.cat([value(rank, n, torch.int32, salt=b) for b in range(size)]) for n in (4, 300)]
    outs = [torch.zeros(n, dtype=torch.int32) for n in (4, 300)]
    with dist._coalescing_manager(async_ops=True) as cm:
        for o, i in zip(outs, blocks):
            dist.reduce_scatter_tensor(o, i)
    cm.wait()
    for o, n in zip(outs, (4, 300)):
        check(o, reduce_ref([value(r, n, torch.int32, salt=rank) for r in range(size)], "SUM", torch.int32, size),
              f"coalesced reduce_scatter n={n}")
    # all_reduce_coalesced (the ProcessGroup method)
    pg = dist.distributed_c10d._get_default_group()
    ts = [value(rank, 9, torch.float64), value(rank, 2, torch.float64, salt=1)]
    opts = dist.AllreduceCoalescedOptions()
    opts.reduceOp = dist.ReduceOp.MAX
    pg.allreduce_coalesced(ts, opts).wait()
    check(ts[0], reduce_ref([value(r, 9, torch.float64) for r in range(size)], "MAX", torch.float64, size), "allreduce_coalesced")
    # all_gather_coalesced (gloo's list form): outs[r][i] gets rank r's ins[i],
    # of any sizes, empty ones and non-contiguous outputs among them
    for dtype in (torch.float32, torch.int64, torch.bfloat16):
        ins = [value(rank, 6, dtype, salt=3).view(2, 3), value(rank, 70001, dtype, salt=4), value(rank, 0, dtype)]
        outs = [[torch.zeros(3, 2, dtype=dtype).t(), torch.zeros(70001, dtype=dtype), torch.zeros(0, dtype=dtype)]
                for _ in range(size)]
        dist.all_gather_coalesced(outs, ins, async_op=True).wait()
        for r in range(size):
            check(outs[r][0], value(r, 6, dtype, salt=3).view(2, 3), f"all_gather_coalesced {dtype} from rank {r}")
            check(outs[r][1], value(r, 70001, dtype, salt=4), f"all_gather_coalesced {dtype} n=70001 from rank {r}")
    try:
        dist.all_gather_coalesced([[torch.zeros(1)]] * (size + 1), [torch.zeros(1)])
        raise AssertionError("all_gather_coalesced took one output list too many")
    except RuntimeError as e:
        assert "one per rank of the group" in str(e), e
    try:  # a rank's list one tensor short of the inputs
        dist.all_gather_coalesced([[torch.zeros(1)]] * size, [torch.zeros(1), torch.zeros(2)])
        raise AssertionError("all_gather_coalesced took an output list shorter than the inputs")
    except RuntimeError as e:
        assert "each output list must have 2 tensors" in str(e), e
    try:  # an output tensor of another size than its input
        dist.all_gather_coalesced([[torch.zeros(1), torch.zeros(3)]] * size, [torch.zeros(1), torch.zeros(2)])
        raise AssertionError("all_gather_coalesced took an output of the wrong size")
    except (RuntimeError, ValueError) as e:
        assert "an output tensor has 3 elements but the input has 2" in str(e), e
    after = torch.ones(3)  # and the group still works after the refusals
    dist.all_reduce(after)
    check(after, torch.full((3,), float(size)), "all_reduce after refused all_gather_coalesced calls")


def alltoall(rank, size):
    for dtype in (torch.float32, torch.int64, torch.bool, torch.int16, torch.complex64):
        # equal splits
        rows = 3
        inp = (torch.arange(size * rows * 2).reshape(size * rows, 2) + 100 * rank).to(dtype)
        out = torch.zeros_like(inp)
        dist.all_to_all_single(out, inp)
        want = torch.cat([(torch.arange(size * rows * 2).reshape(size * rows, 2) + 100 * r).to(dtype)[rank * rows:(rank + 1) * rows]
                          for r in range(size)])
        check(out, want, f"all_to_all_single {dtype}")
        # uneven: rank r sends (r + p) % 3 rows to rank p
        send = [(r + p) % 3 for r in range(size) for p in range(size)]
        ins = [send[rank * size + p] for p in range(size)]
        outs = [send[r * size + rank] for r in range(size)]
        inp = torch.cat([torch.full((ins[p], 2), rank * 10 + p).to(dtype) for p in range(size)]) if sum(ins) else torch.zeros(0, 2, dtype=dtype)
        out = torch.full((sum(outs), 2), -1).to(dtype)
        dist.all_to_all_single(out, inp, output_split_sizes=outs, input_split_sizes=ins)
        want = torch.cat([torch.full((outs[r], 2), r * 10 + rank).to(dtype) for r in range(size)]) if sum(outs) else out
        check(out, want, f"all_to_all_single uneven {dtype}")
        # list form
        ins = [torch.full((p + 1,), rank * 10 + p).to(dtype) for p in range(size)]
        outs = [torch.zeros(rank + 1, dtype=dtype) for _ in range(size)]
        dist.all_to_all(outs, ins)
        for r in range(size):
            check(outs[r], torch.full((rank + 1,), r * 10 + rank).to(dtype), f"all_to_all {dtype} from {r}")
        # list form, outputs the inputs rotated (one peer's output is another's input)
        xs = [torch.full((1000,), rank * 10 + p).to(dtype) for p in range(size)]
        outs = [xs[(p + 1) % size] for p in range(size)]
        dist.all_to_all(outs, xs)
        for r in range(size):
            check(outs[r], torch.full((1000,), r * 10 + rank).to(dtype), f"all_to_all into rotated inputs {dtype} from {r}")
    if size > 1:
        # without split sizes dim 0 is split, as gloo's and NCCL's: rows that do not divide by the group's size are
        # refused on every rank (their elements did divide, and rows were cut in the middle)
        inp = torch.arange((size + 1) * size, dtype=torch.float32).reshape(size + 1, size)
        try:
            dist.all_to_all_single(torch.zeros_like(inp), inp)
        except RuntimeError as e:
            assert "does not divide equally across group size" in str(e), str(e)
        else:
            raise AssertionError(f"all_to_all_single of {size + 1} rows over {size} ranks was taken")
        inp = torch.ones(size, 2)
        out = torch.zeros(size, 2)
        dist.all_to_all_single(out, inp)  # the group goes on
        check(out, torch.ones(size, 2), "all_to_all_single after a refused one")


def p2p(rank, size):
    if size == 1:
        return
    nxt, prv = (rank + 1) % size, (rank - 1) % size
    for n in (1, 1000, 3 << 20):  # 12 MiB of float: more than a FIFO holds
        # A ring exchange with isend/irecv (run together, so large ones cannot deadlock).
        out = torch.arange(n, dtype=torch.float32) + rank
        got = torch.zeros(n)
        reqs = [dist.isend(out, nxt, tag=7), dist.irecv(got, prv, tag=7)]
        for q in reqs:
            q.wait()
        check(got, torch.arange(n, dtype=torch.float32) + prv, f"isend/irecv n={n}")
        # The same with the irecv late: the isend has been launched on its own by then.
        got = torch.zeros(n)
        s = dist.isend(out, nxt, tag=8)
        time.sleep(0.02)
        r = dist.irecv(got, prv, tag=8)
        s.wait()
        r.wait()
        check(got, torch.arange(n, dtype=torch.float32) + prv, f"isend, later irecv n={n}")
        # a receive's work names its peer, as gloo's (torch's default refuses any work)
        assert r._source_rank() == prv, f"irecv's source_rank {r._source_rank()}, expected {prv}"
        # batch_isend_irecv both ways
        a, b = torch.zeros(n), torch.zeros(n)
        ops = [dist.P2POp(dist.isend, out, nxt), dist.P2POp(dist.isend, out, prv),
               dist.P2POp(dist.irecv, a, prv), dist.P2POp(dist.irecv, b, nxt)]
        for q in dist.batch_isend_irecv(ops):
            q.wait()
        check(a, torch.arange(n, dtype=torch.float32) + prv, f"batch_isend_irecv from prev n={n}")
        check(b, torch.arange(n, dtype=torch.float32) + nxt, f"batch_isend_irecv from next n={n}")
        # to and from itself in one batch, the receive first (torch's test_batch_isend_irecv_self_nccl)
        mine = torch.zeros(n)
        for q in dist.batch_isend_irecv([dist.P2POp(dist.irecv, mine, rank), dist.P2POp(dist.isend, out, rank)]):
            q.wait()
        check(mine, torch.arange(n, dtype=torch.float32) + rank, f"batch_isend_irecv with itself n={n}")
    # blocking send/recv with tags, even ranks first
    t = torch.tensor([rank * 1.0, 2.0])
    if rank % 2 == 0:
        if rank + 1 < size:
            dist.send(t, rank + 1, tag=3)
            r = torch.zeros(2)
            dist.recv(r, rank + 1, tag=4)
            check(r, torch.tensor([rank + 1.0, 2.0]), "recv with tag 4")
    else:
        r = torch.zeros(2)
        dist.recv(r, rank - 1, tag=3)
        check(r, torch.tensor([rank - 1.0, 2.0]), "recv with tag 3")
        dist.send(t, rank - 1, tag=4)
    dist.barrier()


def strided(rank, size):
    """Strided views as inputs and outputs: results land in the view, nothing around it changes."""
    def view(rows=5, cols=4):
        base = torch.full((cols + 2, rows), -7.0)
        return base, base[1:cols + 1].t()  # rows x cols, not contiguous

    def untouched(base, what):
        assert torch.all(base[0] == -7) and torch.all(base[-1] == -7), f"{what} wrote outside the view"

    base, v = view()
    v.copy_(torch.arange(20.0).reshape(5, 4) + rank)
    dist.broadcast(v, src=0)
    check(v, torch.arange(20.0).reshape(5, 4), "broadcast of a strided view")
    untouched(base, "broadcast")
    _, src = view()
    src.copy_(torch.full((5, 4), float(rank)))
    pairs = [view() for _ in range(size)]
    dist.all_gather([p[1] for p in pairs], src)
    for r, (b, o) in enumerate(pairs):
        check(o, torch.full((5, 4), float(r)), f"all_gather into a strided view from {r}")
        untouched(b, "all_gather")
    # flat outputs that are views: all_gather_into_tensor, reduce_scatter_tensor, all_to_all_single
    fb = torch.full((4, 5 * size + 2), -7.0)
    flat = fb[:, 1:-1].t()  # 5*size x 4, strided: the ranks' blocks one after another
    dist.all_gather_into_tensor(flat, src)
    check(flat, torch.cat([torch.full((5, 4), float(r)) for r in range(size)]), "all_gather_into_tensor into a view")
    assert torch.all(fb[:, 0] == -7) and torch.all(fb[:, -1] == -7), "all_gather_into_tensor wrote outside the view"
    b2, out = view()
    inp = (torch.arange(20.0 * size).reshape(5 * size, 4) + rank).t().contiguous().t()  # strided input too
    dist.reduce_scatter_tensor(out, inp)
    want = (torch.arange(20.0 * size).reshape(5 * size, 4)[5 * rank:5 * rank + 5]) * size + sum(range(size))
    check(out, want, "reduce_scatter_tensor between strided views")
    untouched(b2, "reduce_scatter_tensor")
    ab = torch.full((2, 3 * size + 2), -7.0)
    out = ab[:, 1:-1].t()  # 3*size x 2, strided
    inp = (torch.arange(size * 3.0) + 100 * rank).reshape(size * 3, 1).expand(size * 3, 2)  # stride 0
    dist.all_to_all_single(out, inp)
    want = torch.cat([(torch.arange(size * 3.0) + 100 * r)[3 * rank:3 * rank + 3] for r in range(size)])
    check(out, want.reshape(-1, 1).expand(-1, 2).contiguous(), "all_to_all_single between strided views")
    assert torch.all(ab[:, 0] == -7) and torch.all(ab[:, -1] == -7), "all_to_all_single wrote outside the view"
    if size > 1:
        b3, r3 = view()
        if rank == 0:
            dist.send(torch.arange(20.0).reshape(5, 4), 1)
        elif rank == 1:
            dist.recv(r3, 0)
            check(r3, torch.arange(20.0).reshape(5, 4), "recv into a strided view")
            untouched(b3, "recv")
    # A strided parameter that requires grad (a transposed nn.Parameter, a
    # channels_last weight) or an inference tensor used outside inference
    # mode takes the result too, as gloo writes it (until 2026-12-06 the
    # copy back into it failed under autograd's in-place checks).
    w = torch.nn.Parameter(torch.full((4, 5), float(rank + 1)).t())
    dist.all_reduce(w)
    check(w.detach(), torch.full((5, 4), float(sum(range(1, size + 1)))), "all_reduce into a strided parameter")
    assert w.requires_grad and w.is_leaf, "the parameter lost its grad"
    dist.broadcast(w, src=0)
    check(w.detach(), torch.full((5, 4), float(sum(range(1, size + 1)))), "broadcast into a strided parameter")
    with torch.inference_mode():
        inf = torch.full((4, 5), float(rank)).t()
    dist.all_reduce(inf)
    check(inf, torch.full((5, 4), float(sum(range(size)))), "all_reduce into a strided inference tensor")
    dist.barrier()


def p2p_peers_independent(rank, size):
    """A send or receive waits only for the earlier ones to the same peer in
    the same direction, as with gloo (until 2026-12-06 all of a rank's sends
    shared one stream and all its receives another, so both flows below
    waited for the group's timeout): rank 0 sends rank 2 a large tensor
    that rank 2 takes only after rank 1 has passed on what rank 0 sent it
    next; then rank 0 waits for its second receive (from rank 1) before it
    sends what rank 2 waits for to answer its first. And each operation of a
    batch_isend_irecv waits only for those earlier ones too (a batch that
    waited for rank 0's large isend to rank 1 before its irecv began waited
    for rank 1, which sends before it receives)."""
    if size < 2:
        return
    n = 1 << 22  # 16 MiB: more than a FIFO holds, so the send waits for its receiver
    if rank == 0:
        x = dist.isend(torch.full((n,), 1.0), 1)
        time.sleep(0.01)
        y = torch.zeros(n)
        for r in dist.batch_isend_irecv([dist.P2POp(dist.isend, torch.full((4,), 3.0), 1),
                                         dist.P2POp(dist.irecv, y, 1)]):
            r.wait()
        x.wait()
        check(y[:4], torch.full((4,), 2.0), "the batch's receive")
    elif rank == 1:
        dist.send(torch.full((n,), 2.0), 0)
        x, z = torch.zeros(n), torch.zeros(4)
        dist.recv(x, 0)
        dist.recv(z, 0)
        check(x[:4], torch.full((4,), 1.0), "the isend before the batch")
        check(z, torch.full((4,), 3.0), "the batch's send")
    if size < 3:
        dist.barrier()
        return
    if rank == 0:
        first = dist.isend(torch.full((n,), 2.0), 2)
        time.sleep(0.01)  # apart, not batched together
        second = dist.isend(torch.full((n,), 1.0), 1)
        first.wait()
        second.wait()
    elif rank == 1:
        x = torch.zeros(n)
        dist.recv(x, 0)
        dist.send(x * 3, 2)
    elif rank == 2:
        z, y = torch.zeros(n), torch.zeros(n)
        dist.recv(z, 1)
        dist.recv(y, 0)
        check(z[:4], torch.full((4,), 3.0), "the forwarded send")
        check(y[:4], torch.full((4,), 2.0), "the large send queued first")
    if rank == 0:
        a, b = torch.zeros(4), torch.zeros(4)
        ra = dist.irecv(a, 2)
        time.sleep(0.01)
        rb = dist.irecv(b, 1)
        rb.wait()
        dist.send(torch.ones(4), 2)
        ra.wait()
        check(b, torch.full((4,), 5.0), "the receive posted second")
        check(a, torch.full((4,), 7.0), "the receive posted first")
    elif rank == 1:
        dist.send(torch.full((4,), 5.0), 0)
    elif rank == 2:
        t = torch.zeros(4)
        dist.recv(t, 0)
        dist.send(t + 6, 0)
    dist.barrier()


def p2p_around_collectives(rank, size):
    """Sends and receives pending while a collective runs are neither held up
    by it nor matched against its traffic (they run on a communicator of
    their own, as with torch's NCCL backend): rank 0 issues its isend or
    irecv first, rank 1 the collective first."""
    if size == 1:
        return
    big = torch.arange(float(3 << 20))  # 12 MiB: more than a FIFO holds, so the send waits for its receiver
    if rank == 0:
        s = dist.isend(big, 1)
        dist.barrier()
        s.wait()
    else:
        dist.barrier()
        if rank == 1:
            got = torch.zeros(big.numel())
            dist.recv(got, 0)
            check(got, big, "a large isend pending across a barrier")
    ref = torch.arange(4.0) + 100
    x = torch.arange(float(2 * size)) + 10 * rank
    o = torch.zeros(2 * size)
    if rank == 0:
        got = torch.zeros(4)
        r = dist.irecv(got, 1)
        dist.all_to_all_single(o, x)
        r.wait()
        check(got, ref, "an irecv pending across an all_to_all_single")
    else:
        dist.all_to_all_single(o, x)
        if rank == 1:
            dist.send(ref, 0)
    check(o, torch.cat([torch.arange(2.0) + 2 * rank + 10 * p for p in range(size)]), "all_to_all_single beside an irecv")
    b = torch.full((3,), float(rank))
    if rank == 0:
        s = dist.isend(ref, 1)
        dist.broadcast(b, src=1)
        s.wait()
    else:
        dist.broadcast(b, src=1)
        if rank == 1:
            got = torch.zeros(4)
            dist.recv(got, 0)
            check(got, ref, "an isend pending across a broadcast")
    check(b, torch.full((3,), 1.0), "broadcast beside an isend")


def main():
    size = int(sys.argv[1])
    cases = {name: (lambda f=f: harness.run(size, f)) for name, f in [
        ("all_reduce", all_reduce), ("avg_unbiased", avg_unbiased), ("refused", refused), ("rooted", rooted), ("gathers", gathers),
        ("coalesced", coalesced), ("alltoall", alltoall), ("p2p", p2p), ("strided", strided),
        ("p2p_around_collectives", p2p_around_collectives), ("uneven_lists", uneven_lists)]}
    # a failure here is a wait for the timeout: a short one
    cases["p2p_peers_independent"] = lambda: harness.run(size, p2p_peers_independent, pg_timeout=10)
    harness.main(cases, sys.argv[2:])


if __name__ == "__main__":
    main()
