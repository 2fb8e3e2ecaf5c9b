"""Per call signature, the fastest MIOpen-free path for the forward and each gradient, measured once.

Like cuDNN's benchmark mode, but among the paths of paths.py: the first call of a signature
(shapes, stride, padding, dilation, groups, dtypes, device, memory format, which gradients are
needed) times every eligible candidate on the device, direction by direction, then times the whole
layer (forward + backward) of the best combination against the routes that need no Python in
backward (PyTorch's slow_conv2d with its own autograd, a 1x1 bmm under plain autograd), and keeps
the fastest. ``select`` is the pure part: it sees the candidates only through a ``Timer``, so tests
drive it with a fake one. The ``Tuner`` caches choices per process and, optionally, on disk
(tune_store.py), and logs one debug line per signature with the choice and the times.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch

from gpuwatch.train.conv2d.plan import Choice, Conv2dTuning, Plan
from gpuwatch.train.conv2d.tune_store import TuneStore, environment

_log = logging.getLogger("gpuwatch.train")

Trial = Callable[[], object]
# (label, trial) -> seconds per call; the label ("forward.im2col", "layer.thnn"...) is for fakes and logs.
Timer = Callable[[str, Trial], float]


def default_choice(plan: Plan, contiguous: bool, needs_x: bool, needs_w: bool) -> Choice:
    """The deterministic choice (autotuning off, or no timer for the device): the fixed strategies of
    ``Conv2dTuning``."""
    if plan.pointwise and contiguous:
        return Choice("pointwise")
    input_grad = "transpose" if plan.dgrad_cols else ("taps" if plan.dgrad_taps else "col2im")
    weight_grad = "gemm" if plan.wgrad_gemm else "bmm"
    if plan.shared_cols and needs_x and needs_w:
        input_grad = weight_grad = "shared"
    return Choice("function", "im2col", input_grad if needs_x else "", weight_grad if needs_w else "")


def signature(
    input_shape: Sequence[int], weight_shape: Sequence[int], dtype: torch.dtype, weight_dtype: torch.dtype,
    plan: Plan, bias: bool, needs: Sequence[bool], layout: str, tuning: Conv2dTuning, compiled: bool = False,
) -> str:
    """The key of one choice, readable in logs and in the disk cache: everything the paths' speed
    depends on within one environment (the device itself is the store's key, tune_store.py)."""
    g = plan.geom
    return (
        f"{list(input_shape)} weight {list(weight_shape)} {str(dtype)[6:]}/{str(weight_dtype)[6:]} "
        f"stride {g.stride} padding {g.padding} dilation {g.dilation} groups {g.groups} bias {int(bias)} "
        f"grads {''.join(str(int(n)) for n in needs)} {layout} cols {tuning.max_cols_bytes}"
        + (" triton" if tuning.triton else "")
        + (" compiled" if compiled else "")  # the host code's cost is part of what was measured
    )


@dataclass
class Candidates:
    """Zero-argument trials per direction, by path name (built from the real tensors by function.py).

    ``function(choice)`` is the whole layer through the autograd Function with that choice;
    ``layers`` the whole-layer routes that need no Function. ``grads`` is False for a forward only.
    """

    forward: Mapping[str, Trial]
    grads: bool = False
    input_grad: Mapping[str, Trial] = field(default_factory=dict)
    weight_grad: Mapping[str, Trial] = field(default_factory=dict)
    both_grads: Mapping[str, Trial] = field(default_factory=dict)
    layers: Mapping[str, Trial] = field(default_factory=dict)
    function: Callable[[Choice], Trial] | None = None


def select(candidates: Candidates, timer: Timer) -> tuple[Choice, dict[str, float]]:
    """The fastest choice and every time measured on the way (seconds, by label)."""
    times: dict[str, float] = {}

    def fastest(direction: str, trials: Mapping[str, Trial]) -> str:
        for name, trial in trials.items():
            label = f"{direction}.{name}"
            try:
                times[label] = timer(label, trial)
            except Exception as exc:  # a kernel that does not compile or run here is not a candidate
                _log.debug("conv2d autotuning: %s failed (%s: %s)", label, type(exc).__name__, exc)
                times[label] = float("inf")
        return min(trials, key=lambda name: times[f"{direction}.{name}"])

    forward = fastest("forward", candidates.forward)
    if not candidates.grads:
        return Choice("forward", forward), times
    input_grad = fastest("input_grad", candidates.input_grad) if candidates.input_grad else ""
    weight_grad = fastest("weight_grad", candidates.weight_grad) if candidates.weight_grad else ""
    if candidates.both_grads:
        both = fastest("both_grads", candidates.both_grads)
        split = times[f"input_grad.{input_grad}"] + times[f"weight_grad.{weight_grad}"]
        if times[f"both_grads.{both}"] < split:
            input_grad = weight_grad = both
    composed = Choice("function", forward, input_grad, weight_grad)
    layers = dict(candidates.layers)
    if candidates.function is not None:
        layers["function"] = candidates.function(composed)
    if len(layers) < 2:
        return composed, times
    route = fastest("layer", layers)
    return (composed if route == "function" else Choice(route)), times


def device_timer(device: torch.device, warmup: int = 1, reps: int = 3, rounds: int = 2) -> Timer:
    """Synchronised wall time per call, best of ``rounds`` runs of ``reps`` back-to-back calls after
    ``warmup`` calls: the larger of the host's and the device's time per call, as in a training step."""

    def sync() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    def timer(label: str, trial: Trial) -> float:
        for _ in range(warmup):
            trial()
        sync()
        best = float("inf")
        for _ in range(rounds):
            start = time.perf_counter()
            for _ in range(reps):
                trial()
            sync()
            best = min(best, (time.perf_counter() - start) / reps)
        return best

    return timer


def pinned_timer(label: str) -> Timer:
    """A timer under which the path ``label`` ("input_grad.slow", "layer.thnn"...) wins wherever it is
    eligible, and the other directions keep one path each inside the Function: to force a path (tests,
    the benchmarks' parity check). Every trial still runs once."""

    def timer(name: str, trial: Trial) -> float:
        trial()
        if name == label:
            return 0.0
        kind = name.partition(".")[0]
        if kind == "layer":
            return 0.5 if name == "layer.function" else 1.0
        return 10.0 if kind == "both_grads" else 1.0

    return timer


@dataclass
class Tuner:
    """The process-wide chooser: which devices are timed, with what timer, and the disk stores."""

    devices: frozenset[str] = frozenset({"cuda"})  # ROCm builds call their GPUs "cuda" too
    timer_for: Callable[[torch.device], Timer] = device_timer
    stores: dict[tuple[str, str], TuneStore] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)
    history: list[tuple[str, Choice, dict[str, float]]] = field(default_factory=list)

    def times(self, device: torch.device) -> bool:
        """Whether choices on ``device`` are measured (not while a CUDA graph is being captured or
        torch.compile traces: both forbid the synchronisation)."""
        if device.type not in self.devices:
            return False
        if device.type == "cuda" and torch.cuda.is_available() and torch.cuda.is_current_stream_capturing():
            return False
        is_compiling: Callable[[], bool] = getattr(torch.compiler, "is_compiling", lambda: False)  # torch >= 2.3
        return not is_compiling()

    def choose(
        self, signature: str, device: torch.device, cache_dir: str | None, build: Callable[[], Candidates]
    ) -> Choice:
        with self.lock:
            store = self._store(device, cache_dir)
            cached = store.get(signature) if store is not None else None
            if cached is not None:
                _log.debug("conv2d %s: %s (from %s)", signature, cached.describe(), store.path if store else "")
                return cached
            choice, times = select(build(), self.timer_for(device))
            self.history.append((signature, choice, times))
            _log.debug("conv2d %s: %s; %s", signature, choice.describe(),
                       ", ".join(f"{label} {seconds * 1e6:.0f} us" for label, seconds in times.items()))
            if store is not None:
                store.put(signature, choice, times)
            return choice

    def _store(self, device: torch.device, cache_dir: str | None) -> TuneStore | None:
        if cache_dir is None:
            return None
        key = (str(device), cache_dir)
        if key not in self.stores:
            self.stores[key] = TuneStore(Path(cache_dir), environment(device))
        return self.stores[key]


TUNER = Tuner()
