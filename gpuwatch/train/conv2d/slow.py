"""PyTorch's own convolution kernels with cuDNN/MIOpen switched off around the call: the ``slow`` paths.

``aten.convolution`` and ``aten.convolution_backward`` choose their kernel when they run, from one
global switch (``torch.backends.cudnn.enabled``, which is MIOpen's on ROCm): with it off PyTorch runs
slow_conv2d, slow_conv_dilated2d or its CUDA depthwise kernel. ``vendor_off`` turns it off for the
calls inside only, and ``vendor_free`` asks PyTorch's backend selection which kernel a signature
would get, so that tune.py offers these paths only where it is none of the vendor's.
``thnn_conv2d`` is slow_conv2d called directly: its autograd backward is slow_conv2d's own, whatever
the switch says.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

import torch
from torch import Tensor

from gpuwatch.train.conv2d.plan import Plan

_VENDOR = {"Cudnn", "CudnnTranspose", "Miopen", "MiopenDepthwise", "MiopenTranspose"}
_vendor_lock = threading.Lock()
_vendor_off_depth = 0
_vendor_saved = True


@contextmanager
def vendor_off() -> Iterator[None]:
    """cuDNN/MIOpen disabled for the calls inside (one global flag, so nested and concurrent users
    share one switch: it is restored when the last of them leaves)."""
    global _vendor_off_depth, _vendor_saved
    with _vendor_lock:
        if _vendor_off_depth == 0:
            _vendor_saved = torch._C._get_cudnn_enabled()
            torch._C._set_cudnn_enabled(False)
        _vendor_off_depth += 1
    try:
        yield
    finally:
        with _vendor_lock:
            _vendor_off_depth -= 1
            if _vendor_off_depth == 0:
                torch._C._set_cudnn_enabled(_vendor_saved)


def vendor_free(x: Tensor, w: Tensor, plan: Plan) -> bool:
    """Whether PyTorch, with cuDNN/MIOpen off, runs this convolution on a kernel of its own."""
    g = plan.geom
    try:
        with vendor_off():
            backend = torch._C._select_conv_backend(
                x, w, None, list(g.stride), list(g.padding), list(g.dilation), False, [0, 0], g.groups
            )
    except (AttributeError, RuntimeError, TypeError):  # a torch without this (private) helper: do not risk it
        return False
    return backend.name not in _VENDOR


def thnn_eligible(plan: Plan) -> bool:
    """``_slow_conv2d_forward`` (whose autograd backward is ``_slow_conv2d_backward``, never a vendor
    call) takes neither groups nor dilation."""
    return plan.geom.groups == 1 and plan.geom.dilation == (1, 1)


def thnn_conv2d(x: Tensor, w: Tensor, bias: Tensor | None, plan: Plan) -> Tensor:
    g = plan.geom
    # torch._C._nn's stub does not list thnn_conv2d (the binding of _slow_conv2d_forward).
    out: Tensor = torch._C._nn.thnn_conv2d(x, w, list(g.kernel), bias, list(g.stride), list(g.padding))  # type: ignore[attr-defined]
    return out


def forward_slow(x: Tensor, w: Tensor, plan: Plan) -> Tensor:
    g = plan.geom
    with vendor_off():
        out: Tensor = torch.ops.aten.convolution(x, w, None, g.stride, g.padding, g.dilation, False, (0, 0), g.groups)
    return out


def input_grad_slow(x: Tensor, grad_out: Tensor, w: Tensor, flipped: Tensor | None, plan: Plan) -> Tensor:
    return _slow_backward(grad_out, x, w, plan, (True, False))[0]


def weight_grad_slow(x: Tensor, grad_out: Tensor, w: Tensor, plan: Plan) -> Tensor:
    return _slow_backward(grad_out, x, w, plan, (False, True))[1]


def both_grads_slow(
    x: Tensor, grad_out: Tensor, w: Tensor, flipped: Tensor | None, plan: Plan
) -> tuple[Tensor, Tensor]:
    return _slow_backward(grad_out, x, w, plan, (True, True))


def _slow_backward(
    grad_out: Tensor, x: Tensor, w: Tensor, plan: Plan, mask: tuple[bool, bool]
) -> tuple[Tensor, Tensor]:
    g = plan.geom
    with vendor_off():
        grads = torch.ops.aten.convolution_backward(
            grad_out, x, w, None, g.stride, g.padding, g.dilation, False, (0, 0), g.groups, [*mask, False]
        )
    return grads[0], grads[1]
