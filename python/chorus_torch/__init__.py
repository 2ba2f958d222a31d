"""chorus as a torch.distributed backend.

    import chorus_torch            # torch >= 2.15 finds it without the import
    dist.init_process_group("chorus")

CPU tensors; every rank's failure is an exception naming the rank at fault.
"""
import atexit
import warnings

__version__ = "0.1.0"
__all__ = ["register", "flight_recorder"]


def _create(opts, backend_options):
    # torch calls this for each group: the default one, new_group, split_group.
    from . import _C

    return _C._create_backend(
        opts.store,
        opts.group_rank,
        opts.group_size,
        opts.timeout,
        opts.group_id,
        list(opts.global_ranks_in_group),
        getattr(opts, "split_from", None),
    )


def register():
    """Registers the backend "chorus" for CPU tensors (once; later calls do nothing)."""
    import torch.distributed as dist

    if hasattr(dist.Backend, "CHORUS"):
        return
    # Registered now, early, so that it runs after the handlers a program
    # registers later (a destroy_process_group, a last collective).
    atexit.register(_at_exit)
    dist.Backend.register_backend("chorus", _create, extended_api=True, devices=["cpu"])
    # chorus keeps its own flight recorder (flight_recorder() below, dumped on
    # a timeout), as gloo does: torch's generic recording hook on top of it
    # would cost each 8-byte all_reduce about as much as everything else.
    c10d = dist.distributed_c10d
    if isinstance(getattr(c10d, "_FR_SELF_RECORDING_BACKENDS", None), set):
        c10d._FR_SELF_RECORDING_BACKENDS.add("chorus")


def _at_exit():
    # From here on chorus's own threads no longer drop what may need the
    # GIL (csrc/pyexit.hpp); nothing to do if no group was ever made.
    import sys

    c = sys.modules.get("chorus_torch._C")
    if c is not None:
        c._python_at_exit()


def flight_recorder(group=None):
    """The group's last operations, oldest first: seq, op, sizes, dtype, state."""
    import torch
    import torch.distributed as dist

    pg = group if group is not None else dist.distributed_c10d._get_default_group()
    return pg._get_backend(torch.device("cpu"))._flight_recorder()


def _autoload():
    # torch's entry points call this at `import torch` (group torch.backends)
    # or when the backend is first named (torch.distributed.backends): it
    # must never break torch, so a failure is a warning.
    try:
        register()
    except Exception as e:  # noqa: BLE001
        warnings.warn(f"chorus_torch: could not register the chorus backend: {e}")


register()
