"""Runs a function on N forked processes, one per rank (as torchrun would),
each inside init_process_group; fails as soon as one rank fails, with that
rank's traceback, instead of waiting for the others to time out.

    results = run(3, fn, arg, backend="chorus")   # fn(rank, size, arg) on every rank
"""
import datetime
import multiprocessing as mp
import os
import pickle
import signal
import socket
import sys
import tempfile
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))


def _ephemeral_range():
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            lo, hi = (int(x) for x in f.read().split())
            return lo, hi
    except (OSError, ValueError):
        return 32768, 60999


def free_port():
    """A port free now and outside the kernel's ephemeral range: a port the
    kernel handed out (bind to 0) can be taken as the local end of any
    connection made meanwhile (other tests run at once), and then the
    TCPStore fails with EADDRINUSE."""
    import random

    lo, _ = _ephemeral_range()
    top = lo - 1 if lo > 12000 else 65535
    for _ in range(200):
        port = random.randint(10000, top)
        s = socket.socket()
        try:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind(("127.0.0.1", port))
            return port
        except OSError:
            continue
        finally:
            s.close()
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def _child(rank, size, fn, args, backend, init, env, pg_timeout, device_id, conn):
    code = 1
    try:
        os.environ.update(env)
        os.environ.update({"RANK": str(rank), "WORLD_SIZE": str(size), "LOCAL_RANK": str(rank)})
        import torch
        import torch.distributed as dist

        torch.set_num_threads(1)
        if backend:
            dist.init_process_group(
                backend,
                init_method=init,
                rank=rank,
                world_size=size,
                timeout=datetime.timedelta(seconds=pg_timeout),
                **({"device_id": torch.device(device_id)} if device_id else {}),
            )
        result = fn(rank, size, *args)
        if backend and dist.is_initialized():
            dist.destroy_process_group()
        # plain pickle: the parent reads it after this process is gone (torch's
        # multiprocessing reductions would pass tensors as file descriptors)
        conn.send_bytes(pickle.dumps(("ok", result)))
        code = 0
    except BaseException:  # noqa: BLE001
        conn.send_bytes(pickle.dumps(("fail", traceback.format_exc())))
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def run(size, fn, *args, backend="chorus", init="env", env=None, deadline=120, pg_timeout=60, allow_fail=(),
        device_id=None):
    """fn(rank, size, *args) on `size` forked ranks; returns their results by rank.

    init: "env" (MASTER_ADDR/MASTER_PORT), "tcp" or "file"; None leaves
    init_process_group to fn (backend=None too). Ranks in allow_fail may die.
    """
    port = free_port()
    env = dict(env or {})
    tmp = None
    if init == "env":
        env.update({"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)})
        init = "env://"
    elif init == "tcp":
        init = f"tcp://127.0.0.1:{port}"
    elif init == "file":
        tmp = tempfile.mkdtemp(prefix="chorus_torch_")
        init = f"file://{tmp}/rendezvous"
    env.setdefault("CHORUS_TEST_PORT", str(port))
    ctx = mp.get_context("fork")
    procs, conns = [], []
    for r in range(size):
        parent, child = ctx.Pipe(duplex=False)
        p = ctx.Process(target=_child, args=(r, size, fn, args, backend, init, env, pg_timeout, device_id, child))
        p.start()
        child.close()
        procs.append(p)
        conns.append(parent)
    results, failure = {}, None
    # The test's deadline (tests/deadlines.cmake) caps each run's.
    cap = int(os.environ.get("CHORUS_TEST_DEADLINE", "0") or 0)
    if cap > 0:
        deadline = min(deadline, cap)
    end = time.time() + deadline
    try:
        while len(results) < size and failure is None:
            if time.time() > end:
                failure = f"deadline of {deadline} s passed; ranks {sorted(set(range(size)) - set(results))} did not finish"
                break
            for r, (p, c) in enumerate(zip(procs, conns)):
                if r in results:
                    continue
                if c.poll(0):
                    try:
                        status, payload = pickle.loads(c.recv_bytes())
                    except EOFError:
                        status, payload = "fail", "exited without a result"
                    if status == "ok" or r in allow_fail:
                        results[r] = payload if status == "ok" else None
                    else:
                        failure = f"rank {r} failed:\n{payload}"
                        break
                elif not p.is_alive() and not c.poll(0):
                    if r in allow_fail:
                        results[r] = None
                    else:
                        failure = f"rank {r} exited with {p.exitcode} without a result"
                        break
            time.sleep(0.005)
    finally:
        for p in procs:
            if p.is_alive():
                if failure is not None:
                    os.kill(p.pid, signal.SIGKILL)
                p.join(10 if failure is None else 1)
                if p.is_alive():
                    os.kill(p.pid, signal.SIGKILL)
                    p.join()
        if tmp:
            for f in os.listdir(tmp):
                os.unlink(os.path.join(tmp, f))
            os.rmdir(tmp)
    if failure:
        raise AssertionError(failure)
    return [results[r] for r in range(size)]


def main(cases, argv=None):
    """Runs the named cases (all by default): python3 test_x.py [case ...]."""
    argv = sys.argv[1:] if argv is None else argv
    names = argv or list(cases)
    failed = 0
    for name in names:
        t0 = time.time()
        try:
            cases[name]()
            print(f"{name}: passed ({time.time() - t0:.1f} s)", flush=True)
        except Exception:  # noqa: BLE001
            failed += 1
            print(f"{name}: FAILED ({time.time() - t0:.1f} s)\n{traceback.format_exc()}", flush=True)
    sys.exit(1 if failed else 0)
