"""Process groups: every init_method, new_group (made from the default
group's communicator, members only), split_group, subgroups used side by
side with the default group, the default group made again on one store: python3 test_groups.py [case ...]."""
import sys

import torch
import torch.distributed as dist

import harness


def backend_of(group=None):
    pg = group if group is not None else dist.distributed_c10d._get_default_group()
    return pg._get_backend(torch.device("cpu"))


def sum_check(group, members, rank_in_group):
    t = torch.full((1001,), float(dist.get_rank()))
    dist.all_reduce(t, group=group)
    want = float(sum(members))
    assert torch.all(t == want), f"subgroup {members}: {t[0].item()} want {want}"
    assert dist.get_rank(group) == rank_in_group, (dist.get_rank(group), rank_in_group)
    assert dist.get_world_size(group) == len(members)


def init_methods(rank, size):
    t = torch.ones(3)
    dist.all_reduce(t)
    assert torch.all(t == size)
    assert dist.get_backend() == "chorus"
    assert backend_of().name() == "chorus" if hasattr(backend_of(), "name") else True


def new_groups(rank, size):
    # Subsets made from the default group's communicator by its members alone.
    layouts = [list(range(size))] + [[r for r in range(size) if r % 2 == k] for k in (0, 1)] + [[size - 1], [0, size - 1]]
    groups = []
    for members in layouts:
        members = sorted(set(members))
        if not members:
            continue
        g = dist.new_group(members)
        groups.append((g, members))
    for g, members in groups:
        if rank in members:
            sum_check(g, members, members.index(rank))
            origin = backend_of(g)._origin()
            want = "split" if len(members) == size else "shrink"
            assert origin == want, f"new_group({members}) made by {origin}, not {want}"
        else:
            assert g == dist.GroupMember.NON_GROUP_MEMBER
    # the default group still works, between subgroup calls, async
    w = dist.all_reduce(torch.ones(5), async_op=True)
    for g, members in groups:
        if rank in members:
            sum_check(g, members, members.index(rank))
    w.wait()
    for g, members in groups:
        if rank in members:
            dist.destroy_process_group(g)
    t = torch.ones(2)
    dist.all_reduce(t)
    assert torch.all(t == size)


def subgroups(rank, size):
    # new_subgroups: groups of 2 (or 1), through new_group on every rank
    k = 2 if size % 2 == 0 else 1
    cur, _ = dist.new_subgroups(group_size=k)
    first = rank - rank % k
    sum_check(cur, list(range(first, first + k)), rank % k)


def split_groups(rank, size):
    parts = [list(range(0, size, 2)), list(range(1, size, 2))] if size > 1 else [[0]]
    parts = [p for p in parts if p]
    g = dist.split_group(split_ranks=parts)
    mine = [p for p in parts if rank in p][0]
    sum_check(g, mine, mine.index(rank))
    assert backend_of(g)._origin() == "split"
    # a split leaving ranks out: they get no group, and take part in the split all the same
    if size > 2:
        g2 = dist.split_group(split_ranks=[[0, size - 1]])
        if rank in (0, size - 1):
            sum_check(g2, [0, size - 1], 0 if rank == 0 else 1)
        else:
            assert g2 == dist.GroupMember.NON_GROUP_MEMBER or g2 is None, g2


def bound_device(rank, size):
    # With device_id, torch asks the parent to split for new_group (ranks outside call perform_nocolor_split).
    members = [0, size - 1] if size > 1 else [0]
    g = dist.new_group(members)
    if rank in members:
        sum_check(g, members, members.index(rank))
        assert backend_of(g)._origin() == "split"
    else:
        assert g == dist.GroupMember.NON_GROUP_MEMBER


def reinit(rank, size, port, collective):
    # One store for every init, as torchrun's agent store is: each group made
    # again gets the same prefix, and must not find the last init's id there.
    import datetime

    store = dist.TCPStore("127.0.0.1", port, size, rank == 0, timeout=datetime.timedelta(seconds=30))
    for it in range(5):
        dist.init_process_group("chorus", store=store, rank=rank, world_size=size)
        if collective:  # without one, a rank can destroy and init again before the others finished
            t = torch.full((5,), float(rank + it))
            dist.all_reduce(t)
            assert torch.all(t == sum(range(size)) + size * it), (it, t)
        dist.destroy_process_group()


def out_of_fds(rank, size):
    # new_group after new_group with few descriptors left (the world's
    # and 60 more): the one that runs out fails on every rank, and some
    # rank's error names the cause ("Too many open files"), which a split's
    # child met on a setup thread of its own (it said "unhandled system
    # error" alone).
    import os
    import resource
    was = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (len(os.listdir("/proc/self/fd")) + 60, was[1]))
    made = []
    try:
        for _ in range(100):
            g = dist.new_group(list(range(size)))
            dist.all_reduce(torch.ones(1), group=g)
            made.append(g)
    except RuntimeError as e:
        return len(made), str(e)
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, was)
    raise AssertionError("100 groups with 60 descriptors to spare")


def out_of_fds_named():
    results = harness.run(2, out_of_fds)
    assert any("Too many open files" in text for _, text in results), results


def main():
    cases = {
        "init_env": lambda: [harness.run(n, init_methods, init="env") for n in (1, 2, 3)],
        "init_tcp": lambda: [harness.run(n, init_methods, init="tcp") for n in (1, 3)],
        "init_file": lambda: [harness.run(n, init_methods, init="file") for n in (1, 3)],
        "new_group": lambda: [harness.run(n, new_groups) for n in (1, 2, 3, 4)],
        "new_subgroups": lambda: [harness.run(n, subgroups) for n in (2, 3, 4)],
        "split_group": lambda: [harness.run(n, split_groups) for n in (1, 2, 3, 4)],
        "reinit": lambda: [harness.run(n, reinit, harness.free_port(), c, backend=None) for n in (2, 3) for c in (0, 1)],
        "bound_device": lambda: [harness.run(n, bound_device, device_id="cpu:0") for n in (1, 3)],
        "out_of_fds": out_of_fds_named,
    }
    harness.main(cases)


if __name__ == "__main__":
    main()
