"""Who takes part in a job's pause: the process's role, the lockstep optimizers, the job's timeout and store.

Nothing about a process's role is known at start-up (the injected hook runs before the script):
DataLoader workers inherit ``RANK`` and ``WORLD_SIZE``, forked ones even an initialised process group,
and ``torch.multiprocessing.spawn`` ranks have no ``RANK`` and start exactly like spawned DataLoader
workers. So the role is read at the process's first optimizer step (``current_role``).

Only optimizers that every rank steps in lockstep may agree on anything: a collective in an
optimizer that rank 0 alone steps would deadlock the job. An optimizer is lockstep when it owns a
parameter of a ``DistributedDataParallel`` module (or a sharded DTensor/FlatParameter: FSDP, TP); a
job without any DDP module is taken as lockstep as a whole. ``track_ddp`` remembers the parameters of
every DDP module built after it is installed.
"""

from __future__ import annotations

import datetime
import logging
import os
import weakref
from collections.abc import Callable
from typing import Any, Literal

import torch
import torch.distributed as dist
from torch.utils.data import get_worker_info

Role = Literal["inert", "single", "rank"]  # DataLoader worker / one process / a rank of a job
_SHARDED = ("DTensor", "FlatParameter")
_log = logging.getLogger("gpuwatch.train")

_ddp_params: dict[int, weakref.ref[torch.Tensor]] = {}
_ddp_seen = False


def current_role() -> Role:
    """At an optimizer step: a DataLoader worker (checked first: a forked one has the parent's process
    group), a rank of a torch.distributed job (any world size), or a single process."""
    if get_worker_info() is not None:
        return "inert"
    if dist.is_available() and dist.is_initialized():
        return "rank"
    return "single"


def track_ddp() -> Callable[[], None]:
    """Wrap ``DistributedDataParallel.__init__`` to remember its module's parameters; returns the undo."""
    from torch.nn.parallel import DistributedDataParallel

    original = DistributedDataParallel.__init__
    if getattr(original, "_gpuwatch_tracking", False):
        return lambda: None

    def init(self: DistributedDataParallel, module: torch.nn.Module, *args: Any, **kwargs: Any) -> None:
        global _ddp_seen
        original(self, module, *args, **kwargs)
        _ddp_seen = True
        for param in module.parameters():
            _ddp_params[id(param)] = weakref.ref(param)

    init._gpuwatch_tracking = True  # type: ignore[attr-defined]
    DistributedDataParallel.__init__ = init  # type: ignore[method-assign]

    def undo() -> None:
        DistributedDataParallel.__init__ = original  # type: ignore[method-assign]

    return undo


def is_lockstep(optimizer: torch.optim.Optimizer) -> bool:
    """Does every rank step this optimizer together? (see the module's docstring)."""
    if not _ddp_seen:
        return True
    for group in optimizer.param_groups:
        for param in group["params"]:
            ref = _ddp_params.get(id(param))
            if (ref is not None and ref() is param) or type(param).__name__ in _SHARDED:
                return True
    return False


def pg_timeout() -> datetime.timedelta:
    """The timeout the job gave ``init_process_group`` (its backend's default when it gave none).

    Read from the default group's backend options: private API, present since torch 1.x; the
    backend's documented default otherwise.
    """
    group = dist.distributed_c10d._get_default_group()
    for device in ("cpu", "cuda"):
        try:
            timeout = group._get_backend(torch.device(device)).options._timeout
        except Exception:  # no backend for that device, or no options: try the next
            continue
        if isinstance(timeout, datetime.timedelta):
            return timeout
    if "nccl" in str(dist.get_backend()):
        return getattr(dist, "default_pg_nccl_timeout", None) or dist.default_pg_timeout
    return dist.default_pg_timeout


def job_store() -> Any:
    """The job's own store (torchrun's rendezvous store, or rank 0's): private API with a public fallback.

    ``_get_default_store`` exists since torch 1.x; without it an ``env://`` job's store is reached at
    ``MASTER_ADDR:MASTER_PORT``. Other init methods then have none: the caller gives up on pausing.
    """
    getter = getattr(dist.distributed_c10d, "_get_default_store", None)
    if getter is not None:
        return getter()
    return dist.TCPStore(  # type: ignore[attr-defined]
        os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), is_master=False, timeout=pg_timeout())


def restart_count() -> int | None:
    """torchrun's restart count of this node's agent (per node: not a job-wide number)."""
    text = os.environ.get("TORCHELASTIC_RESTART_COUNT")
    return int(text) if text and text.isdigit() else None


def local_world_size(world_size: int) -> int:
    """Ranks on this node: torchrun says so; a job started otherwise is taken as one node."""
    text = os.environ.get("LOCAL_WORLD_SIZE")
    return int(text) if text and text.isdigit() else world_size
