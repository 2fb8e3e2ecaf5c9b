"""Route nn.Conv2d (one model's, or every one) through the im2col fallback; modes off/on/auto; undo.

Patching is done at the class level (``nn.Conv2d._conv_forward``) plus a plain string mark on the
patched modules, never with bound methods stored on instances: training scripts (Ultralytics among
them) pickle whole models into checkpoints, and a checkpoint must load without gpuwatch installed.

``auto`` probes the native convolution lazily, on the first convolution run on each device and dtype,
instead of at launch: scripts often pick their device (or set ``CUDA_VISIBLE_DEVICES``) themselves,
and touching the GPU before they do would break that.

While a patch is in place, backward passes started by the patching thread run on that thread
(``torch.autograd.set_multithreading_enabled(False)``, thread-local) instead of on the autograd
engine's device thread. The fallback's backward is Python, and Python there costs far more: on the
H100 VM a YOLOv8n-shaped step at batch 16 AMP took 48.2 ms with the engine's thread and 41.3 ms
on the caller (native convolutions: 37.1 and 33.3 ms; benchmarks/conv2d_fallback.py). Only
several GPUs driven from one process lose something (the engine's per-device threads); such a
script passes ``backward_on_caller=False`` or turns the setting back on itself.
"""

from __future__ import annotations

import logging
import threading
import weakref
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from gpuwatch.train.argv import FALLBACK_MODES, FallbackMode
from gpuwatch.train.conv2d.function import conv2d
from gpuwatch.train.conv2d.geometry import autocast_dtype
from gpuwatch.train.conv2d.plan import DEFAULT_TUNING, Conv2dTuning
from gpuwatch.train.rng import untouched_rng

_MARK = "_gpuwatch_conv2d_mode"
_log = logging.getLogger("gpuwatch.train")

# The vendor convolution the probe exercises; a module attribute so tests can make it fail.
native_conv2d = torch.conv2d


@dataclass
class _State:
    original_conv_forward: Any = None  # nn.Conv2d._conv_forward while our hook is installed
    original_functional: Any = None  # F.conv2d while the global patch is installed
    global_mode: FallbackMode | None = None
    global_tuning: Conv2dTuning = DEFAULT_TUNING
    # Patched modules -> the tuning of the patch that marked them (kept here, not on the module,
    # which carries only its plain string mark).
    marked: weakref.WeakKeyDictionary[nn.Module, Conv2dTuning] = field(default_factory=weakref.WeakKeyDictionary)
    probes: dict[tuple[str, int | None, torch.dtype], bool] = field(default_factory=dict)


_STATE = _State()


@dataclass
class Conv2dPatch:
    """Handle returned by ``patch_conv2d``; ``undo()`` (or leaving the ``with`` block) reverts it."""

    mode: FallbackMode
    modules: list[weakref.ref[nn.Module]] | None  # None: the global patch
    previous_global: FallbackMode | None = None
    previous_tuning: Conv2dTuning = DEFAULT_TUNING
    undone: bool = False
    backward_guard: torch.autograd.set_multithreading_enabled | None = None  # of the patching thread
    thread_id: int = field(default_factory=threading.get_ident)

    def undo(self) -> None:
        if self.undone:
            return
        self.undone = True
        # The setting is per thread: only the thread that changed it can put it back.
        if self.backward_guard is not None and threading.get_ident() == self.thread_id:
            self.backward_guard.__exit__(None, None, None)
        if self.modules is None:
            _STATE.global_mode, _STATE.global_tuning = self.previous_global, self.previous_tuning
        else:
            for ref in self.modules:
                module = ref()
                if module is not None and module.__dict__.get(_MARK) == self.mode:
                    del module.__dict__[_MARK]
                    _STATE.marked.pop(module, None)
        _sync_hooks()

    def __enter__(self) -> Conv2dPatch:
        return self

    def __exit__(self, *exc: object) -> None:
        self.undo()


def patch_conv2d(
    model: nn.Module | None = None,
    mode: FallbackMode = "on",
    *,
    backward_on_caller: bool = True,
    tuning: Conv2dTuning = DEFAULT_TUNING,
) -> Conv2dPatch:
    """Use the fallback for ``model``'s Conv2d modules, or for every Conv2d and F.conv2d when None.

    ``backward_on_caller``: run this thread's backward passes on this thread while the patch is in
    place (see the module docstring); the previous setting comes back with ``undo()``.
    ``tuning``: how the fallback computes gradients (benchmarks compare settings; keep the default).
    """
    if mode not in FALLBACK_MODES:
        raise ValueError(f"conv2d fallback mode must be one of {FALLBACK_MODES}, got {mode!r}")
    # set_multithreading_enabled applies the setting when constructed; its __exit__ restores it.
    guard = torch.autograd.set_multithreading_enabled(False) if backward_on_caller and mode != "off" else None
    if model is None:
        handle = Conv2dPatch(mode, None, previous_global=_STATE.global_mode, previous_tuning=_STATE.global_tuning,
                             backward_guard=guard)
        _STATE.global_mode = None if mode == "off" else mode
        _STATE.global_tuning = tuning
        _sync_hooks()
        return handle
    refs: list[weakref.ref[nn.Module]] = []
    if mode != "off":
        for module in model.modules():
            if isinstance(module, nn.Conv2d):
                module.__dict__[_MARK] = mode
                _STATE.marked[module] = tuning
                refs.append(weakref.ref(module))
    _sync_hooks()
    return Conv2dPatch(mode, refs, backward_guard=guard)


def uses_fallback(mode: FallbackMode, device: torch.device, dtype: torch.dtype) -> bool:
    """Whether a convolution on ``device`` in ``dtype`` takes the fallback under ``mode``."""
    if mode != "auto":
        return mode == "on"
    key = (device.type, device.index, dtype)
    works = _STATE.probes.get(key)
    if works is None:
        works = _STATE.probes[key] = native_conv_works(device, dtype)
    return not works


def native_conv_works(device: torch.device, dtype: torch.dtype = torch.float32) -> bool:
    """Run one small native convolution forward and backward; False if it raises or is disabled.

    The probe runs at the script's first convolution, so it leaves every random stream as it found it."""
    if device.type == "cuda" and not torch.backends.cudnn.enabled:
        _log.warning("cuDNN/MIOpen is disabled on %s: using the im2col conv2d fallback", device)
        return False
    try:
        with untouched_rng(), torch.inference_mode(False), torch.enable_grad():
            x = torch.randn(2, 4, 8, 8, device=device, dtype=dtype, requires_grad=True)
            w = torch.randn(4, 4, 3, 3, device=device, dtype=dtype, requires_grad=True)
            native_conv2d(x, w, None, 1, 1).float().square().sum().backward()
            if device.type == "cuda":
                torch.cuda.synchronize(device)
    except Exception as exc:  # MIOpen reports failures as RuntimeError; any failure means "don't"
        _log.warning("native conv2d failed on %s (%s): using the im2col fallback", device, exc)
        return False
    return True


def reset_probes() -> None:
    """Forget the auto-mode probe results (tests; or after changing cudnn settings)."""
    _STATE.probes.clear()


def _conv_dtype(input: Tensor) -> torch.dtype:
    return autocast_dtype(input.device.type) or input.dtype


def _patched_conv_forward(self: nn.Conv2d, input: Tensor, weight: Tensor, bias: Tensor | None) -> Tensor:
    mode = self.__dict__.get(_MARK) or _STATE.global_mode
    if mode != "on" and (mode is None or not uses_fallback(mode, input.device, _conv_dtype(input))):
        native: Tensor = _STATE.original_conv_forward(self, input, weight, bias)
        return native
    tuning = _STATE.marked.get(self, _STATE.global_tuning)
    if self.padding_mode != "zeros":
        input = F.pad(input, self._reversed_padding_repeated_twice, mode=self.padding_mode)
        return conv2d(input, weight, bias, self.stride, 0, self.dilation, self.groups, tuning=tuning)
    return conv2d(input, weight, bias, self.stride, self.padding, self.dilation, self.groups, tuning=tuning)


def _patched_functional(
    input: Tensor,
    weight: Tensor,
    bias: Tensor | None = None,
    stride: Any = 1,
    padding: Any = 0,
    dilation: Any = 1,
    groups: int = 1,
) -> Tensor:
    mode = _STATE.global_mode
    if mode == "on" or (mode is not None and uses_fallback(mode, input.device, _conv_dtype(input))):
        return conv2d(input, weight, bias, stride, padding, dilation, groups, tuning=_STATE.global_tuning)
    native: Tensor = _STATE.original_functional(input, weight, bias, stride, padding, dilation, groups)
    return native


def _sync_hooks() -> None:
    """Install the class/functional hooks exactly while something needs them."""
    want_class = _STATE.global_mode is not None or len(_STATE.marked) > 0
    if want_class and _STATE.original_conv_forward is None:
        _STATE.original_conv_forward = nn.Conv2d._conv_forward
        nn.Conv2d._conv_forward = _patched_conv_forward  # type: ignore[method-assign]
    elif not want_class and _STATE.original_conv_forward is not None:
        nn.Conv2d._conv_forward = _STATE.original_conv_forward  # type: ignore[method-assign]
        _STATE.original_conv_forward = None
    want_functional = _STATE.global_mode is not None
    if want_functional and _STATE.original_functional is None:
        _STATE.original_functional = F.conv2d
        F.conv2d = _patched_functional  # type: ignore[assignment]
    elif not want_functional and _STATE.original_functional is not None:
        F.conv2d = _STATE.original_functional
        _STATE.original_functional = None
