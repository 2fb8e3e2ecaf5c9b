"""A pure-PyTorch 2-D convolution (im2col + matmul) that never calls MIOpen or cuDNN.

Some ROCm stacks fail inside MIOpen (``miopenStatusUnknownError``) on consumer cards; this module
computes the same thing as ``F.conv2d`` with column gathers and matrix products only.

1x1 stride-1 convolutions are a plain batched matmul on the input (autograd differentiates it).
Everything else is a custom autograd Function that saves only the input and the weight (what a
native convolution saves), never the columns. Backward builds the output gradient's columns once
for a stride-1 convolution and takes both gradients from them (the input gradient is a correlation
with the flipped kernel); strided ones gather the input's columns again for the weight gradient and
sum the input gradient's columns back with col2im.
Columns are built in batch chunks bounded by ``Conv2dTuning.max_cols_bytes``.

Speed: small-channel CNNs are host-bound with this fallback (each tensor call costs the CPU 3-30 us
on the benchmark VMs), so each direction is a few kernels (conv_columns.py), every shape decision is
made once per call signature and cached (conv_plan.py), and under autocast the weight is cast inside
the Function rather than by an autograd-recorded cast in front of it. patch.py also moves backward
onto the calling thread, where this Python backward is cheaper.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.autograd.function import once_differentiable

from gpuwatch.train.conv_columns import batched_mm, col2im, col2im_taps, columns_t, flip_index, im2col
from gpuwatch.train.conv_geometry import IntOrPair, autocast_cast, autocast_dtype, is_channels_last
from gpuwatch.train.conv_plan import DEFAULT_TUNING, Cols, Conv2dTuning, Plan, plan_for


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
    dtype = autocast_dtype(input.device.type)
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
    if plan.pointwise and input.is_contiguous():
        if dtype is not None:
            weight = autocast_cast(weight, dtype)
            bias = None if bias is None else autocast_cast(bias, dtype)
        out = _pointwise(input, weight, bias, groups)
    else:
        out = _Im2colConv2d.apply(input, weight, bias, plan, dtype)
    return out.squeeze(0) if plan.unbatched else out


def _key(value: object) -> object:
    return tuple(value) if isinstance(value, list) else value


def _pointwise(x: Tensor, weight: Tensor, bias: Tensor | None, groups: int) -> Tensor:
    """1x1, stride 1, NCHW: one bmm on views of the input, differentiated by autograd itself.

    Autograd saves only views of the input and the weight here, so nothing is stored beyond what a
    native convolution keeps, and the backward runs without any Python (these layers are tiny).
    """
    n, c, h, w = x.shape
    out_c = weight.shape[0]
    out = batched_mm(weight.reshape(groups, out_c // groups, c // groups), x.view(n, c, h * w))
    out = out.view(n, out_c, h, w)
    return out if bias is None else out + bias.view(1, -1, 1, 1)


class _Im2colConv2d(torch.autograd.Function):
    @staticmethod
    def forward(
        ctx: Any, x: Tensor, weight: Tensor, bias: Tensor | None, plan: Plan, dtype: torch.dtype | None
    ) -> Tensor:
        # Under autocast the weight is cast here rather than before the call, so its gradient leaves
        # this node in its own dtype: no ToCopyBackward node and cast kernel per layer (the backward
        # is host-bound), and the weight gradient's batch sum accumulates in float32.
        w = weight if dtype is None else autocast_cast(weight, dtype)
        ctx.plan = plan
        ctx.bias_dtype = None if bias is None else bias.dtype
        ctx.save_for_backward(x, weight)
        ctx.cast_weight = None if w is weight else w  # what native autocast keeps for backward too
        ctx.channels_last = channels_last = is_channels_last(x)
        groups = plan.geom.groups
        if plan.dgrad_cols is not None and ctx.needs_input_grad[0]:
            # The flipped kernel of the input gradient (weight-sized) is gathered here rather than in
            # backward: calls inside the autograd engine's device thread cost 1.0-1.9x more (H200 VM),
            # should a backward run there (patch.py moves it to the calling thread).
            ctx.flipped = torch.take(w, flip_index(w.shape, groups, w.device))
        out = _correlate(x.contiguous(), w, groups, plan.cols, plan.out_size, plan.chunk)
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
    """The gradients of ``_Im2colConv2d``, computed with autograd off."""
    x, weight = ctx.saved_tensors
    w = weight if ctx.cast_weight is None else ctx.cast_weight
    plan: Plan = ctx.plan
    needs_x, needs_w, needs_b = ctx.needs_input_grad[:3]
    grad_out = grad_out.contiguous()
    grad_b = grad_out.sum((0, 2, 3), dtype=ctx.bias_dtype) if needs_b else None
    grad_x: Tensor | None
    grad_w: Tensor | None
    if needs_x and plan.shared_cols:
        grad_x, grad_w = _grads_from_output_columns(x.contiguous(), grad_out, ctx.flipped, plan, needs_w)
    else:
        grad_w = _weight_grad(x.contiguous(), grad_out, w, plan) if needs_w else None
        grad_x = _input_grad(grad_out, w, ctx.flipped if plan.dgrad_cols else None, plan) if needs_x else None
    if grad_w is not None:
        grad_w = grad_w.to(weight.dtype)
    if grad_x is not None and ctx.channels_last:
        grad_x = grad_x.contiguous(memory_format=torch.channels_last)
    return grad_x, grad_w, grad_b, None, None


_backward_once_differentiable = once_differentiable(_backward)


def _correlate(x: Tensor, weight: Tensor, groups: int, cols: Cols, out_size: tuple[int, int], chunk: int) -> Tensor:
    """Cross-correlation of contiguous NCHW ``x`` with ``weight``: im2col + one bmm per chunk."""
    n, out_c = x.shape[0], weight.shape[0]
    w_g = weight.reshape(groups, out_c // groups, -1)
    length = out_size[0] * out_size[1]
    if chunk >= n:
        return batched_mm(w_g, im2col(x, *cols, length)).view(n, out_c, *out_size)
    out = x.new_empty((n, out_c, *out_size))
    for start in range(0, n, chunk):
        part = batched_mm(w_g, im2col(x[start : start + chunk], *cols, length))
        out[start : start + chunk] = part.view(-1, out_c, *out_size)
    return out


def _batch_sum(part: Tensor) -> Tensor:
    """Sum per-sample weight-gradient products over the batch, in float32 at least."""
    return part.sum(0, dtype=torch.promote_types(part.dtype, torch.float32))


def _add_chunk(total: Tensor | None, part: Tensor) -> Tensor:
    """Add one batch chunk's weight gradient; chunks add up in float32 so batch splits do not cost
    half-precision accuracy."""
    return part if total is None else total.to(torch.promote_types(part.dtype, torch.float32)) + part


def _grads_from_output_columns(
    x: Tensor, grad_out: Tensor, flipped: Tensor, plan: Plan, needs_w: bool
) -> tuple[Tensor, Tensor | None]:
    """Stride 1: both gradients from one im2col of grad_out (the columns of the input gradient).

    With those columns G (padding d*(k-1)-p), G[n, (o, a, b), q] = grad_out at q + d*((a, b) - (k-1)) + p,
    so the weight gradient W'[o, c, i, j] = sum_n,q x[n, c, q] * G[n, (o, k-1-i, k-1-j), q]: a per-sample
    product x[n] @ G[n]^T shaped like the flipped kernel, summed over the batch and flipped back.
    That saves building the input's columns a second time (one launch and k*k times the
    activation written, per layer).
    """
    assert plan.dgrad_cols is not None  # shared columns are planned for stride 1 only
    n, c = x.shape[:2]
    g, (kh, kw) = plan.geom.groups, plan.geom.kernel
    length = plan.in_size[0] * plan.in_size[1]
    w_flip = flipped.reshape(g, c // g, -1)
    chunk = plan.dgrad_chunk
    grad_x = None if chunk >= n else grad_out.new_empty((n, c, *plan.in_size))
    total: Tensor | None = None
    for start in range(0, n, chunk):
        go, x_part = (grad_out, x) if chunk >= n else (grad_out[start : start + chunk], x[start : start + chunk])
        rows = go.shape[0]
        cols = im2col(go, *plan.dgrad_cols, length)
        part_x = batched_mm(w_flip, cols).view(rows, c, *plan.in_size)
        if grad_x is None:
            grad_x = part_x
        else:
            grad_x[start : start + rows] = part_x
        if needs_w:
            part = torch.bmm(x_part.view(rows * g, c // g, length), cols.view(rows * g, -1, length).transpose(1, 2))
            total = _add_chunk(total, _batch_sum(part.view(rows, c, -1)))
    assert grad_x is not None
    if total is None:
        return grad_x, None
    # total is (C, O/g*kh*kw), the flipped kernel's layout; the same gather maps it back.
    flipped_shape = torch.Size((c, flipped.shape[1], kh, kw))
    return grad_x, torch.take(total, flip_index(flipped_shape, g, total.device))


def _weight_grad(x: Tensor, grad_out: Tensor, weight: Tensor, plan: Plan) -> Tensor:
    """The weight gradient from the input's columns (built again: they are never saved)."""
    n, chunk, g = x.shape[0], plan.chunk, plan.geom.groups
    out_c = weight.shape[0]
    length = plan.out_size[0] * plan.out_size[1]
    total: Tensor | None = None
    for start in range(0, n, chunk):
        x_part, go = (x, grad_out) if chunk >= n else (x[start : start + chunk], grad_out[start : start + chunk])
        rows = x_part.shape[0]
        if plan.wgrad_gemm:
            go_t = go.view(rows, g, out_c // g, length).permute(1, 2, 0, 3).reshape(g, out_c // g, rows * length)
            total = _add_chunk(total, torch.bmm(go_t, columns_t(x_part, plan.geom).transpose(1, 2)))
        else:
            cols = im2col(x_part, *plan.cols, length).view(rows * g, -1, length)
            part = torch.bmm(go.view(rows * g, out_c // g, length), cols.transpose(1, 2))
            total = _add_chunk(total, _batch_sum(part.view(rows, out_c, -1)))
    assert total is not None
    return total.view(weight.shape)


def _input_grad(grad_out: Tensor, weight: Tensor, flipped: Tensor | None, plan: Plan) -> Tensor:
    """``flipped``: the (C, O/g, kh, kw) flipped kernel where ``plan.dgrad_cols`` is set."""
    g, out_c = plan.geom.groups, weight.shape[0]
    if plan.dgrad_cols is not None:
        assert flipped is not None
        return _correlate(grad_out, flipped, g, plan.dgrad_cols, plan.in_size, plan.dgrad_chunk)
    n, chunk = grad_out.shape[0], plan.chunk
    w_t = weight.reshape(g, out_c // g, -1).transpose(1, 2)
    go = grad_out.view(n, out_c, -1)
    if chunk >= n:
        return _sum_columns(batched_mm(w_t, go), plan)
    grad_x = grad_out.new_empty((n, weight.shape[1] * g, *plan.in_size))
    for start in range(0, n, chunk):
        grad_x[start : start + chunk] = _sum_columns(batched_mm(w_t, go[start : start + chunk]), plan)
    return grad_x


def _sum_columns(cols: Tensor, plan: Plan) -> Tensor:
    if plan.dgrad_taps:
        return col2im_taps(cols, plan.in_size, *plan.cols, plan.out_size)
    return col2im(cols, plan.in_size, *plan.cols)
