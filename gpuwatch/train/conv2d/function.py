"""A pure-PyTorch 2-D convolution that never calls MIOpen or cuDNN: the fastest of several per signature.

Some ROCm stacks fail inside MIOpen (``miopenStatusUnknownError``) on consumer cards; this module
computes the same thing as ``F.conv2d`` with column gathers, matrix products and PyTorch's own
non-vendor convolution kernels only (paths.py). Which of them runs is decided once per call
signature (tune.py: measured on GPUs unless ``Conv2dTuning.autotune`` is off) and kept on the
signature's plan (plan.py), so a call is a dictionary lookup and a short line of tensor ops.

Routes: a custom autograd Function that saves only the input and the weight (what a native
convolution saves, never the columns) and runs the chosen path for the forward and for each
gradient; PyTorch's slow_conv2d under its own autograd (no Python in backward); a 1x1 convolution as
one bmm under plain autograd; or, when no gradient is needed, the chosen forward path alone.

Speed: small-channel CNNs are host-bound with this fallback (each tensor call costs the CPU 3-30 us
on the benchmark VMs), so each path is a few kernels and under autocast the weight is cast inside
the Function rather than by an autograd-recorded cast in front of it. Where host.py's compiled
host code builds, the Function and the 1x1 route run in it (the same kernels, one call from Python,
no Python in backward); the Python Function below is the fallback of the fallback, and the home of
the paths that have no compiled form (``slow``, ``triton``). patch.py also moves backward onto the
calling thread, where a Python backward is cheaper.
"""

from __future__ import annotations

import functools
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.autograd.function import once_differentiable

from gpuwatch.train.conv2d import host as conv_host
from gpuwatch.train.conv2d import paths
from gpuwatch.train.conv2d import slow as conv_slow
from gpuwatch.train.conv2d.columns import batched_mm
from gpuwatch.train.conv2d.geometry import IntOrPair, autocast_cast, autocast_dtype
from gpuwatch.train.conv2d.plan import DEFAULT_TUNING, Choice, Conv2dTuning, Plan, plan_for
from gpuwatch.train.conv2d.tune import TUNER, Candidates, default_choice, signature


def conv2d(
    input: Tensor,
    weight: Tensor,
    bias: Tensor | None = None,
    stride: IntOrPair = 1,
    padding: str | IntOrPair = 0,
    dilation: IntOrPair = 1,
    groups: int = 1,
    *,
    tuning: Conv2dTuning = DEFAULT_TUNING,
) -> Tensor:
    """Same signature and result as ``torch.nn.functional.conv2d``, without the vendor conv library."""
    device = input.device
    dtype = autocast_dtype(device.type)
    if dtype is not None:
        # Computing in the autocast dtype makes AMP behave like a native conv: half precision
        # compute and output, float32 master-weight gradients.
        input = autocast_cast(input, dtype)
    try:
        plan = plan_for(input.shape, weight.shape, input.dtype, stride, padding, dilation, groups, tuning)
    except TypeError:  # list arguments are not hashable
        plan = plan_for(input.shape, weight.shape, input.dtype, *map(_key, (stride, padding, dilation)), groups, tuning)
    if plan.unbatched:
        input = input.unsqueeze(0)
    if plan.extra != (0, 0):
        input = F.pad(input, (0, plan.extra[1], 0, plan.extra[0]))
    grad = torch.is_grad_enabled()
    contiguous = input.is_contiguous()
    key = (
        device,
        weight.dtype,
        bias is not None,
        grad and input.requires_grad,
        grad and weight.requires_grad,
        grad and bias is not None and bias.requires_grad,
        contiguous,
        not contiguous and input.is_contiguous(memory_format=torch.channels_last),
    )
    host = conv_host.host_ops(tuning.host)
    call = plan.host_calls.get(key) if host is not None else None
    if call is not None:  # the common case: one lookup, then the compiled operator
        op, args = call
        out: Tensor = op(input, weight, bias, *args, dtype)
    else:
        choice = plan.choices.get(key) or _choose(plan, key, input, weight, bias, dtype, tuning)
        out = _run(choice, input, weight, bias, plan, dtype, host)
        if host is not None and plan.choices.get(key) is choice:
            call = conv_host.call_of(host, plan, choice, weight)
            if call is not None:
                plan.host_calls[key] = call
    return out.squeeze(0) if plan.unbatched else out


def _key(value: object) -> object:
    return tuple(value) if isinstance(value, list) else value


def _run(
    choice: Choice, x: Tensor, weight: Tensor, bias: Tensor | None, plan: Plan, dtype: torch.dtype | None,
    host: conv_host.HostOps | None,
) -> Tensor:
    call = conv_host.call_of(host, plan, choice, weight) if host is not None else None
    if call is not None:
        op, args = call
        compiled: Tensor = op(x, weight, bias, *args, dtype)
        return compiled
    if choice.route == "function":
        out: Tensor = _TunedConv2d.apply(x, weight, bias, plan, dtype, choice)
        return out
    w = weight if dtype is None else autocast_cast(weight, dtype)
    if choice.route == "pointwise":
        b = bias if dtype is None else autocast_cast(bias, dtype)
        return _pointwise(x, w, b, plan.geom.groups)
    if choice.route == "thnn":
        out = conv_slow.thnn_conv2d(x, w, bias if dtype is None else autocast_cast(bias, dtype), plan)
    else:  # "forward": nothing needs a gradient
        out = paths.FORWARD[choice.forward](x.contiguous(), w, plan)
        if bias is not None:
            out += bias.view(1, -1, 1, 1)
    return out.contiguous(memory_format=torch.channels_last) if _channels_last(x) else out


def _channels_last(x: Tensor) -> bool:
    """NHWC strides that are not also plain NCHW (ambiguous shapes count as NCHW, as in PyTorch)."""
    return not x.is_contiguous() and x.is_contiguous(memory_format=torch.channels_last)


def _pointwise(x: Tensor, weight: Tensor, bias: Tensor | None, groups: int) -> Tensor:
    """1x1, stride 1, NCHW: one bmm on views of the input, differentiated by autograd itself.

    Autograd saves only views of the input and the weight here, so nothing is stored beyond what a
    native convolution keeps, and the backward runs without any Python.
    """
    n, c, h, w = x.shape
    out_c = weight.shape[0]
    out = batched_mm(weight.reshape(groups, out_c // groups, c // groups), x.view(n, c, h * w))
    out = out.view(n, out_c, h, w)
    return out if bias is None else out + bias.view(1, -1, 1, 1)


class _TunedConv2d(torch.autograd.Function):
    @staticmethod
    def forward(
        ctx: Any, x: Tensor, weight: Tensor, bias: Tensor | None, plan: Plan, dtype: torch.dtype | None, choice: Choice
    ) -> Tensor:
        # Under autocast the weight is cast here rather than before the call, so its gradient leaves
        # this node in its own dtype: no ToCopyBackward node and cast kernel per layer (the backward
        # is host-bound), and the weight gradient's batch sum accumulates in float32.
        w = weight if dtype is None else autocast_cast(weight, dtype)
        ctx.plan, ctx.choice = plan, choice
        ctx.bias_dtype = None if bias is None else bias.dtype
        ctx.save_for_backward(x, weight)
        ctx.cast_weight = None if w is weight else w  # what native autocast keeps for backward too
        ctx.channels_last = channels_last = _channels_last(x)
        ctx.flipped = None
        if choice.input_grad in ("transpose", "shared") and ctx.needs_input_grad[0]:
            # The flipped kernel of the input gradient (weight-sized) is gathered here rather than in
            # backward: calls inside the autograd engine's device thread cost 1.0-1.9x more (H200 VM),
            # should a backward run there (patch.py moves it to the calling thread).
            ctx.flipped = paths.flipped_kernel(w, plan.geom.groups)
        out = paths.FORWARD[choice.forward](x.contiguous(), w, plan)
        if bias is not None:
            out += bias.view(1, -1, 1, 1)  # a float32 bias adds in float32 and rounds once
        return out.contiguous(memory_format=torch.channels_last) if channels_last else out

    @staticmethod
    def backward(ctx: Any, grad_out: Tensor) -> tuple[Tensor | None, ...]:
        if torch.is_grad_enabled():
            # create_graph=True: the results must refuse a double backward (it would miss the
            # flipped kernel's link to the weight), which once_differentiable arranges. Its wrapper
            # cost about 2 ms per YOLOv8n step on the H100 VM, so a plain backward goes without it.
            return _backward_once_differentiable(ctx, grad_out)
        return _backward(ctx, grad_out)


def _backward(ctx: Any, grad_out: Tensor) -> tuple[Tensor | None, ...]:
    """The gradients of ``_TunedConv2d``, computed with autograd off by the chosen paths."""
    x, weight = ctx.saved_tensors
    w = weight if ctx.cast_weight is None else ctx.cast_weight
    plan: Plan = ctx.plan
    choice: Choice = ctx.choice
    needs_x, needs_w, needs_b = ctx.needs_input_grad[:3]
    grad_out = grad_out.contiguous()
    grad_b = grad_out.sum((0, 2, 3), dtype=ctx.bias_dtype) if needs_b else None
    grad_x: Tensor | None = None
    grad_w: Tensor | None = None
    if choice.input_grad == choice.weight_grad and choice.input_grad in paths.BOTH_GRADS:
        # One call computes both; autograd.grad(..., inputs=...) may want only one of them.
        if needs_x or needs_w:
            grad_x, grad_w = paths.BOTH_GRADS[choice.input_grad](x.contiguous(), grad_out, w, ctx.flipped, plan)
            grad_x, grad_w = (grad_x if needs_x else None), (grad_w if needs_w else None)
    else:
        if needs_w:
            grad_w = paths.WEIGHT_GRAD[choice.weight_grad](x.contiguous(), grad_out, w, plan)
        if needs_x:
            grad_x = paths.INPUT_GRAD[choice.input_grad](x, grad_out, w, ctx.flipped, plan)
    if grad_w is not None:
        grad_w = grad_w.to(weight.dtype)
    if grad_x is not None and ctx.channels_last:
        grad_x = grad_x.contiguous(memory_format=torch.channels_last)
    return grad_x, grad_w, grad_b, None, None, None


_backward_once_differentiable = once_differentiable(_backward)


def _choose(
    plan: Plan, key: tuple[Any, ...], x: Tensor, weight: Tensor, bias: Tensor | None, dtype: torch.dtype | None,
    tuning: Conv2dTuning,
) -> Choice:
    device, _, _, needs_x, needs_w, needs_b, contiguous, channels_last = key
    if not (tuning.autotune and TUNER.times(device)):
        choice = default_choice(plan, contiguous, needs_x, needs_w)
        if not tuning.autotune or device.type not in TUNER.devices:  # else: only this call (graph capture)
            plan.choices[key] = choice
        return choice
    layout = "nchw" if contiguous else ("nhwc" if channels_last else "strided")
    host = conv_host.host_ops(tuning.host)
    sig = signature(x.shape, weight.shape, x.dtype, weight.dtype, plan, bias is not None, key[3:6], layout, tuning,
                    compiled=host is not None)
    build = functools.partial(_candidates, plan, x, weight, bias, dtype, key, tuning.triton, host)
    with torch.no_grad(), torch.autocast(device.type, enabled=False):
        choice = TUNER.choose(sig, device, tuning.cache_dir, build)
    plan.choices[key] = choice
    return choice


def _candidates(
    plan: Plan, x: Tensor, weight: Tensor, bias: Tensor | None, dtype: torch.dtype | None, key: tuple[Any, ...],
    triton: bool, host: conv_host.HostOps | None,
) -> Candidates:
    """Every eligible path, as trials on the call's own input and weight (nothing is written to them)."""
    _, _, _, needs_x, needs_w, needs_b, contiguous, _ = key
    x, weight = x.detach(), weight.detach()
    bias = None if bias is None else bias.detach()
    w = weight if dtype is None else autocast_cast(weight, dtype)
    xc = x.contiguous()
    slow = conv_slow.vendor_free(xc, w, plan)
    tri = ["triton"] if triton and paths.triton_eligible(xc, plan) else []
    names = ["im2col", *(["matmul"] if plan.pointwise else []), *(["slow"] if slow else []), *tri]
    forward = {name: functools.partial(paths.FORWARD[name], xc, w, plan) for name in names}
    if not (needs_x or needs_w or needs_b):
        return Candidates(forward)
    # Values do not change the speed of these kernels; a constant leaves the random generators alone.
    grad_out = x.new_full((x.shape[0], weight.shape[0], *plan.out_size), 0.5)
    flipped = paths.flipped_kernel(w, plan.geom.groups) if plan.dgrad_cols is not None else None
    input_grad, weight_grad, both_grads = {}, {}, {}
    if needs_x:
        names = [*(["transpose"] if flipped is not None else []), "col2im", "taps"]
        names += [*(["matmul"] if plan.pointwise else []), *(["slow"] if slow else []), *tri]
        input_grad = {name: functools.partial(paths.INPUT_GRAD[name], xc, grad_out, w, flipped, plan) for name in names}
    if needs_w:
        names = ["bmm", "gemm", *(["slow"] if slow else []), *tri]
        weight_grad = {name: functools.partial(paths.WEIGHT_GRAD[name], xc, grad_out, w, plan) for name in names}
    if needs_x and needs_w:
        names = [*(["shared"] if flipped is not None else []), *(["slow"] if slow else [])]
        both_grads = {name: functools.partial(paths.BOTH_GRADS[name], xc, grad_out, w, flipped, plan) for name in names}

    def layer(choice: Choice) -> functools.partial[None]:
        return functools.partial(_layer_trial, choice, x, weight, bias, plan, dtype, grad_out, key, host)

    layers = {}
    if conv_slow.thnn_eligible(plan):
        layers["thnn"] = layer(Choice("thnn"))
    if plan.pointwise and contiguous:
        layers["pointwise"] = layer(Choice("pointwise"))
    return Candidates(forward, True, input_grad, weight_grad, both_grads, layers, layer)


def _layer_trial(
    choice: Choice, x: Tensor, weight: Tensor, bias: Tensor | None, plan: Plan, dtype: torch.dtype | None,
    grad_out: Tensor, key: tuple[Any, ...], host: conv_host.HostOps | None,
) -> None:
    """Forward and backward of the whole layer by ``choice``, as a training step runs it."""
    _, _, _, needs_x, needs_w, needs_b, _, _ = key
    with torch.enable_grad():
        out = _run(
            choice,
            x.detach().requires_grad_(needs_x),
            weight.detach().requires_grad_(needs_w),
            None if bias is None else bias.detach().requires_grad_(needs_b),
            plan,
            dtype,
            host,
        )
        out.backward(grad_out)
