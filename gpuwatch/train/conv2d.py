"""A pure-PyTorch 2-D convolution (im2col + matmul) that never calls MIOpen or cuDNN.

Some ROCm stacks fail inside MIOpen (``miopenStatusUnknownError``) on consumer cards; this module
computes the same thing as ``F.conv2d`` with unfold/fold (im2col/col2im) and matrix products only.

Memory: the unfolded columns are never saved for backward. Forward saves the input and the weight
(the tensors a native convolution saves), backward recomputes the columns for the weight gradient
and builds the input gradient with a matmul followed by ``F.fold``. Columns are processed in batch
chunks bounded by ``GPUWATCH_CONV2D_MAX_COLS_MB`` so the transient buffer stays small.
"""

from __future__ import annotations

import os

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.autograd.function import once_differentiable

from gpuwatch.train.conv_geometry import (
    ConvGeometry,
    IntOrPair,
    autocast_cast,
    autocast_dtype,
    check_shapes,
    is_channels_last,
    resolve_geometry,
)

# "gemm": one matrix product whose reduction runs over batch*pixels (needs transposed copies);
# "bmm": per-sample products summed afterwards (no copies, less parallel). Benchmarks pick the default.
WGRAD_STRATEGY = os.environ.get("GPUWATCH_CONV2D_WGRAD", "gemm")
MAX_COLS_BYTES = int(float(os.environ.get("GPUWATCH_CONV2D_MAX_COLS_MB", "256")) * 2**20)


def conv2d(
    input: Tensor,
    weight: Tensor,
    bias: Tensor | None = None,
    stride: IntOrPair = 1,
    padding: str | IntOrPair = 0,
    dilation: IntOrPair = 1,
    groups: int = 1,
) -> Tensor:
    """Same signature and result as ``torch.nn.functional.conv2d``, without the vendor conv library."""
    dtype = autocast_dtype(input.device.type)
    if dtype is not None:
        # Cast here and run the Function in that dtype: AMP then behaves like a native conv (half
        # precision compute, half output, float32 master-weight gradients through the cast).
        input, weight, bias = (autocast_cast(t, dtype) for t in (input, weight, bias))  # type: ignore[assignment]
    unbatched = input.dim() == 3
    if unbatched:
        input = input.unsqueeze(0)
    if input.dim() != 4:
        raise RuntimeError(f"conv2d: expected a 3-D or 4-D input, got shape {tuple(input.shape)}")
    geom, extra = resolve_geometry(weight.shape, stride, padding, dilation, groups)
    if extra != (0, 0):
        input = F.pad(input, (0, extra[1], 0, extra[0]))
    check_shapes(input.shape, weight.shape, geom)
    out = _Im2colConv2d.apply(input, weight, bias, geom)
    return out.squeeze(0) if unbatched else out


class _Im2colConv2d(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: Tensor, weight: Tensor, bias: Tensor | None, geom: ConvGeometry) -> Tensor:  # type: ignore[override]
        ctx.geom = geom
        ctx.channels_last = is_channels_last(x)
        ctx.save_for_backward(x, weight)
        out = _forward(x, weight, geom)
        if bias is not None:
            out += bias.view(1, -1, 1, 1)
        if ctx.channels_last:
            out = out.contiguous(memory_format=torch.channels_last)
        return out

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_out: Tensor) -> tuple[Tensor | None, ...]:  # type: ignore[override]
        x, weight = ctx.saved_tensors
        geom: ConvGeometry = ctx.geom
        grad_out = grad_out.contiguous()
        grad_x = grad_w = grad_b = None
        if ctx.needs_input_grad[2]:
            grad_b = grad_out.sum((0, 2, 3))
        if ctx.needs_input_grad[1]:
            grad_w = _weight_grad(x, grad_out, weight.shape, geom)
        if ctx.needs_input_grad[0]:
            grad_x = _input_grad(grad_out, weight, x.shape, geom)
            if ctx.channels_last:
                grad_x = grad_x.contiguous(memory_format=torch.channels_last)
        return grad_x, grad_w, grad_b, None


def _batch_chunks(
    x_shape: torch.Size, element_size: int, weight_shape: torch.Size, geom: ConvGeometry
) -> list[tuple[int, int]]:
    """Batch ranges whose unfolded columns fit the transient budget (at least one sample each)."""
    n, _, h, w = x_shape
    out_h, out_w = geom.out_size(h, w)
    per_sample = weight_shape[1] * geom.groups * geom.kernel[0] * geom.kernel[1]
    per_sample *= out_h * out_w * element_size
    step = max(1, min(n, MAX_COLS_BYTES // max(1, per_sample)))
    return [(start, min(n, start + step)) for start in range(0, n, step)]


def _columns(x: Tensor, geom: ConvGeometry) -> Tensor:
    """(N, groups, Cg*kh*kw, L): im2col in F.unfold's (channel, kh, kw) order, grouped."""
    n, c = x.shape[:2]
    out_h, out_w = geom.out_size(*x.shape[2:])
    if geom.pointwise:
        if geom.stride != (1, 1):
            x = x[:, :, :: geom.stride[0], :: geom.stride[1]]
        return x.reshape(n, geom.groups, c // geom.groups, out_h * out_w)
    cols = F.unfold(x, geom.kernel, geom.dilation, geom.padding, geom.stride)
    return cols.view(n, geom.groups, -1, out_h * out_w)


def _columns_t(x: Tensor, geom: ConvGeometry) -> Tensor:
    """(groups, Cg*kh*kw, N*L): the columns laid out so the batch folds into the reduction axis."""
    n, c = x.shape[:2]
    out_h, out_w = geom.out_size(*x.shape[2:])
    if geom.pointwise:
        if geom.stride != (1, 1):
            x = x[:, :, :: geom.stride[0], :: geom.stride[1]]
        return x.transpose(0, 1).reshape(geom.groups, c // geom.groups, n * out_h * out_w)
    (ph, pw), (dh, dw), (sh, sw) = geom.padding, geom.dilation, geom.stride
    x = x.contiguous()  # the strided view below assumes NCHW strides
    xp = F.pad(x, (pw, pw, ph, ph)) if ph or pw else x
    hp, wp = xp.shape[2:]
    # A strided view gathers every kernel tap in one copy: (C, kh, kw, N, out_h, out_w).
    taps = xp.as_strided(
        (c, geom.kernel[0], geom.kernel[1], n, out_h, out_w),
        (hp * wp, dh * wp, dw, c * hp * wp, sh * wp, sw),
        xp.storage_offset(),
    )
    return taps.reshape(geom.groups, -1, n * out_h * out_w)


def _forward(x: Tensor, weight: Tensor, geom: ConvGeometry) -> Tensor:
    n, _, h, w = x.shape
    out_c, g = weight.shape[0], geom.groups
    out_h, out_w = geom.out_size(h, w)
    w_g = weight.reshape(g, out_c // g, -1)
    out = x.new_empty((n, out_c, out_h, out_w))
    for start, stop in _batch_chunks(x.shape, x.element_size(), weight.shape, geom):
        cols = _columns(x[start:stop], geom)
        rows = stop - start
        torch.bmm(
            w_g.expand(rows, -1, -1, -1).reshape(rows * g, out_c // g, -1),
            cols.reshape(rows * g, -1, out_h * out_w),
            out=out[start:stop].view(rows * g, out_c // g, out_h * out_w),
        )
    return out


def _weight_grad(x: Tensor, grad_out: Tensor, weight_shape: torch.Size, geom: ConvGeometry) -> Tensor:
    out_c, g = weight_shape[0], geom.groups
    length = grad_out.shape[2] * grad_out.shape[3]
    # Partial sums add up in at least float32 so batch splits do not cost half-precision accuracy.
    acc_dtype = torch.promote_types(grad_out.dtype, torch.float32)
    total: Tensor | None = None
    for start, stop in _batch_chunks(x.shape, x.element_size(), weight_shape, geom):
        rows = stop - start
        go = grad_out[start:stop].view(rows, g, out_c // g, length)
        if WGRAD_STRATEGY == "bmm":
            cols = _columns(x[start:stop], geom)
            part = torch.matmul(go, cols.transpose(-1, -2)).sum(0, dtype=acc_dtype)
        else:
            cols = _columns_t(x[start:stop], geom)
            go_t = go.permute(1, 2, 0, 3).reshape(g, out_c // g, rows * length)
            part = torch.bmm(go_t, cols.transpose(1, 2))
        del cols  # free the columns before the next chunk allocates its own
        total = part if total is None else total.to(acc_dtype) + part
    assert total is not None
    return total.to(grad_out.dtype).reshape(weight_shape)


def _input_grad(grad_out: Tensor, weight: Tensor, x_shape: torch.Size, geom: ConvGeometry) -> Tensor:
    n, c, h, w = x_shape
    out_c, g = weight.shape[0], geom.groups
    out_h, out_w = grad_out.shape[2:]
    w_t = weight.reshape(g, out_c // g, -1).transpose(1, 2)
    chunks = _batch_chunks(x_shape, grad_out.element_size(), weight.shape, geom)
    grad_x: Tensor | None = None
    for start, stop in chunks:
        rows = stop - start
        cols = torch.bmm(
            w_t.expand(rows, -1, -1, -1).reshape(rows * g, -1, out_c // g),
            grad_out[start:stop].reshape(rows * g, out_c // g, out_h * out_w),
        )
        part = _col2im(cols.view(rows, -1, out_h * out_w), (rows, c, h, w), geom)
        if len(chunks) == 1:
            return part
        if grad_x is None:
            grad_x = grad_out.new_empty((n, c, h, w))
        grad_x[start:stop] = part
    assert grad_x is not None
    return grad_x


def _col2im(cols: Tensor, x_shape: tuple[int, int, int, int], geom: ConvGeometry) -> Tensor:
    """Sum the columns back onto the input grid (the adjoint of ``_columns``)."""
    n, c, h, w = x_shape
    if not geom.pointwise:
        return F.fold(cols, (h, w), geom.kernel, geom.dilation, geom.padding, geom.stride)
    out_h, out_w = geom.out_size(h, w)
    if geom.stride == (1, 1):
        return cols.view(n, c, h, w)
    grid = cols.new_zeros((n, c, h, w))
    grid[:, :, :: geom.stride[0], :: geom.stride[1]] = cols.view(n, c, out_h, out_w)
    return grid
