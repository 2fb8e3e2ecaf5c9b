"""The fallback's host code compiled: host.cpp built at first use, and the calls into it.

Small-channel CNNs are host-bound with the fallback: from Python each tensor call costs the host
10-30 us on the benchmark VMs, a layer of the autograd Function is 5-10 of them in forward and as
many in a Python backward. host.cpp is the same Function and the same paths, kernel for kernel,
in C++ (host code only: the kernels stay ATen's, nothing is compiled for the GPU), so a layer is one
call from Python and its backward runs without Python.

It is built with ``torch.utils.cpp_extension`` (a C++ compiler and ninja; no Python headers, no
CUDA/ROCm compiler) into ``$TORCH_EXTENSIONS_DIR`` or ``$XDG_CACHE_HOME/gpuwatch`` under a name
that hashes the source, torch's version and build, so a 10-day run, its restarts and later runs
compile once (about 15 s). ``Conv2dTuning.host``: "auto" uses it where it builds and keeps the Python
paths, with one warning, where it does not; "compiled" requires it; "python" never builds it.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import logging
import os
import platform
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import torch
from torch import Tensor

from gpuwatch.train.argv import user_cache_dir
from gpuwatch.train.conv2d.columns import flip_index
from gpuwatch.train.conv2d.plan import Choice, Plan

_log = logging.getLogger("gpuwatch.train")
_SOURCE = Path(__file__).with_name("host.cpp")

HostMode = Literal["auto", "compiled", "python"]

# The spec's layout: host.cpp's Field enum, in this order.
SPEC_FIELDS = (
    "groups", "kh", "kw", "dh", "dw", "ph", "pw", "sh", "sw", "in_h", "in_w", "out_h", "out_w", "chunk",
    "dgrad_chunk", "tph", "tpw", "forward", "input_grad", "weight_grad", "pointwise",
)
_FORWARD = {"im2col": 0, "matmul": 1}
_INPUT_GRAD = {"": 0, "transpose": 1, "col2im": 2, "taps": 3, "matmul": 4, "shared": 5}
_WEIGHT_GRAD = {"": 0, "bmm": 1, "gemm": 2, "shared": 3}


@dataclass(frozen=True)
class HostOps:
    """The compiled operators (``torch.ops.gpuwatch_conv``), called through their overloads' raw
    callables (one Python frame fewer per call)."""

    function_op: Any
    pointwise_op: Any


def call_of(host: HostOps, plan: Plan, choice: Choice, weight: Tensor) -> tuple[Any, tuple[Any, ...]] | None:
    """The compiled operator computing ``choice`` and its arguments after ``(x, weight, bias)`` and before
    the autocast dtype, or None where a path of it has no compiled form (function.conv2d keeps it per
    signature, so a call is one lookup and one operator call)."""
    if choice.route == "pointwise":
        return host.pointwise_op, (plan.geom.groups,)
    if choice.route != "function":
        return None
    spec_ints = spec(plan, choice)
    if spec_ints is None:
        return None
    flip = unflip = None
    if spec_ints[_INPUT_GRAD_AT] in _FLIPPED:
        flip, unflip = _flip_indices(weight.shape, plan.geom.groups, weight.device)
    return host.function_op, (flip, unflip, spec_ints)


_INPUT_GRAD_AT = SPEC_FIELDS.index("input_grad")
_FLIPPED = (_INPUT_GRAD["transpose"], _INPUT_GRAD["shared"])  # paths that correlate with the flipped kernel


@functools.lru_cache(maxsize=256)
def _flip_indices(weight_shape: torch.Size, groups: int, device: torch.device) -> tuple[Tensor, Tensor]:
    """``take`` indices from the weight to its flipped kernel and back (columns.flip_index)."""
    out_c, per_group, kh, kw = weight_shape
    flipped_shape = torch.Size((per_group * groups, out_c // groups, kh, kw))
    return flip_index(weight_shape, groups, device), flip_index(flipped_shape, groups, device)


def spec(plan: Plan, choice: Choice) -> list[int] | None:
    """The compiled Function's description of ``choice`` on ``plan``, or None where a path of it
    (``slow``, ``triton``) has no compiled form."""
    if choice.forward not in _FORWARD or choice.input_grad not in _INPUT_GRAD or choice.weight_grad not in _WEIGHT_GRAD:
        return None
    g = plan.geom
    transposed_padding = plan.dgrad_cols[2] if plan.dgrad_cols is not None else (-1, -1)
    return [
        g.groups, *g.kernel, *g.dilation, *g.padding, *g.stride, *plan.in_size, *plan.out_size, plan.chunk,
        plan.dgrad_chunk, *transposed_padding, _FORWARD[choice.forward], _INPUT_GRAD[choice.input_grad],
        _WEIGHT_GRAD[choice.weight_grad], int(plan.pointwise),
    ]


def host_ops(mode: HostMode) -> HostOps | None:
    """The compiled operators, building them at the first call; None for "python", or for "auto"
    where they do not build (one warning says why). While torch.compile traces, the Python paths."""
    if mode == "python" or _compiling():
        return None
    return _load(mode)


@functools.cache
def _load(mode: HostMode) -> HostOps | None:
    try:
        return _build()
    except Exception as exc:  # a missing compiler or ninja, a full disk, a torch without the headers
        reason = " ".join(str(exc).split())[:300]
        if mode == "compiled":
            raise RuntimeError(f"gpuwatch conv2d fallback: its host code did not compile: {reason}") from exc
        _log.warning("gpuwatch conv2d fallback: host code not compiled (%s); using the Python paths, slower on a "
                     "host-bound step", reason)
        return None


def _build() -> HostOps:
    from torch.utils import cpp_extension  # imported here: it pulls in setuptools

    source = _SOURCE.read_bytes()
    flavour = f"{torch.__version__} cuda {torch.version.cuda} hip {getattr(torch.version, 'hip', None)}"
    digest = hashlib.sha256(source + flavour.encode() + sys.version.encode() + platform.machine().encode())
    name = f"gpuwatch_conv_host_{digest.hexdigest()[:16]}"
    if not hasattr(torch.ops.gpuwatch_conv, "function"):  # loaded already (a second mode in this process)
        directory = build_root() / name
        directory.mkdir(parents=True, exist_ok=True)
        _drop_stale_lock(directory / "lock")
        started = time.monotonic()
        _log.info("gpuwatch conv2d fallback: compiling its host code once, into %s", directory)
        with _ninja_on_path():
            cpp_extension.load(
                name, [str(_SOURCE)], build_directory=str(directory), is_python_module=False,
                extra_cflags=["-O2"], verbose=False,
            )
        _log.info("gpuwatch conv2d fallback: host code ready in %.1f s", time.monotonic() - started)
    return HostOps(torch.ops.gpuwatch_conv.function.default._op, torch.ops.gpuwatch_conv.pointwise.default._op)


def _drop_stale_lock(lock: Path, max_age_s: float = 600.0) -> None:
    """torch's build lock (cpp_extension's FileBaton) is a file the builder deletes when done; a
    builder killed meanwhile (a rank of a job stopped during its first step) leaves it, and every
    later build would wait on it forever. A build takes seconds: an old lock has no builder."""
    try:
        if time.time() - lock.stat().st_mtime > max_age_s:
            lock.unlink(missing_ok=True)
    except OSError:
        pass


@contextlib.contextmanager
def _ninja_on_path() -> Iterator[None]:
    """cpp_extension runs ``ninja`` from PATH; pip's ninja (the train extra) puts it in the
    environment's bin, which is not on PATH when a venv's python is run without activating it."""
    try:
        import ninja
    except ImportError:
        yield
        return
    saved = os.environ.get("PATH", "")
    os.environ["PATH"] = os.pathsep.join([ninja.BIN_DIR, saved])
    try:
        yield
    finally:
        os.environ["PATH"] = saved


def build_root() -> Path:
    """Where compiled host code is kept: torch's own variable for it, else the user's cache."""
    if root := os.environ.get("TORCH_EXTENSIONS_DIR"):
        return Path(root)
    return Path(user_cache_dir())


def _compiling() -> bool:
    is_compiling = getattr(torch.compiler, "is_compiling", None)  # torch >= 2.3
    return bool(is_compiling and is_compiling())
