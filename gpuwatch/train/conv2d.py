"""A pure-PyTorch 2-D convolution (im2col + matmul) that never calls MIOpen or cuDNN.

Some ROCm stacks fail inside MIOpen (``miopenStatusUnknownError``) on consumer cards; this module
computes the same thing as ``F.conv2d`` with padding, strided gathers and matrix products only.

1x1 stride-1 convolutions are a plain batched matmul on the input (autograd differentiates it).
Memory: the unfolded columns are never saved for backward. Forward saves the input and the weight
(the tensors a native convolution saves); backward gathers the columns again for the weight
gradient and computes the input gradient as a transposed convolution (stride 1) or by summing the
columns back with F.fold (strided). Columns are built in batch chunks bounded by
``GPUWATCH_CONV2D_MAX_COLS_MB`` so the transient buffer stays small.

Speed: im2col is one strided-view copy for the whole batch (``F.unfold`` launches one kernel per
sample on CUDA, and ``F.fold`` is several times slower than a copy), and the Python work per call
is kept to a handful of tensor operations, since small-channel CNNs are often launch-bound.
"""

from __future__ import annotations

import functools
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

# Tuning knobs (benchmarks/conv2d_fallback.py compares them). Weight gradient: "gemm" is one matrix
# product reducing over batch*pixels (needs transposed copies), "bmm" per-sample products summed,
# "auto" bmm for 1x1 kernels (no copies at all) and gemm otherwise. Input gradient: "transpose"
# correlates grad_out with the flipped kernel where the stride is 1 (F.fold elsewhere), "fold" always
# uses F.fold (one launch, but its kernel is several times slower than a copy).
WGRAD_STRATEGY = os.environ.get("GPUWATCH_CONV2D_WGRAD", "auto")
DGRAD_STRATEGY = os.environ.get("GPUWATCH_CONV2D_DGRAD", "transpose")
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
        # precision compute and output, float32 master-weight gradients through the cast).
        input, weight = autocast_cast(input, dtype), autocast_cast(weight, dtype)  # type: ignore[assignment]
        bias = autocast_cast(bias, dtype)
    geom, extra = _plan(tuple(weight.shape), _key(stride), _key(padding), _key(dilation), groups)
    unbatched = input.dim() == 3
    if unbatched:
        input = input.unsqueeze(0)
    if extra != (0, 0):
        input = F.pad(input, (0, extra[1], 0, extra[0]))
    if input.dim() != 4:
        raise RuntimeError(f"conv2d: expected a 3-D or 4-D input, got shape {tuple(input.shape)}")
    check_shapes(input.shape, weight.shape, geom)
    if geom.pointwise and geom.stride == (1, 1) and input.is_contiguous():
        out = _pointwise(input, weight, bias, geom.groups)
    else:
        out = _Im2colConv2d.apply(input, weight, bias, geom)
    return out.squeeze(0) if unbatched else out


def _pointwise(x: Tensor, weight: Tensor, bias: Tensor | None, groups: int) -> Tensor:
    """1x1, stride 1, NCHW: one bmm on views of the input, differentiated by autograd itself.

    Autograd saves only views of the input and the weight here, so nothing is stored beyond what a
    native convolution keeps, and the backward runs without any Python (these layers are tiny).
    """
    n, c, h, w = x.shape
    out_c = weight.shape[0]
    out = _batched_mm(weight.reshape(groups, out_c // groups, c // groups), x.view(n, groups, c // groups, h * w))
    out = out.view(n, out_c, h, w)
    return out if bias is None else out + bias.view(1, -1, 1, 1)


class _Im2colConv2d(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: Tensor, weight: Tensor, bias: Tensor | None, geom: ConvGeometry) -> Tensor:  # type: ignore[override]
        ctx.geom = geom
        ctx.channels_last = is_channels_last(x)
        ctx.save_for_backward(x, weight)
        out = _correlate(x, weight, geom)
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
        if not grad_out.is_contiguous():
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


def _key(value: object) -> object:
    return tuple(value) if isinstance(value, list) else value


@functools.lru_cache(maxsize=4096)
def _plan(
    weight_shape: tuple[int, ...], stride: IntOrPair, padding: str | IntOrPair, dilation: IntOrPair, groups: int
) -> tuple[ConvGeometry, tuple[int, int]]:
    return resolve_geometry(weight_shape, stride, padding, dilation, groups)


@functools.lru_cache(maxsize=4096)
def _transposed(geom: ConvGeometry) -> ConvGeometry:
    """Stride-1 input gradient = correlation of grad_out (padded by d*(k-1)-p) with the flipped kernel."""
    pad = tuple(d * (k - 1) - p for d, k, p in zip(geom.dilation, geom.kernel, geom.padding))
    return ConvGeometry(geom.kernel, (1, 1), pad, geom.dilation, geom.groups)  # type: ignore[arg-type]


def _chunks(n: int, per_sample_bytes: int) -> list[tuple[int, int]]:
    """Batch ranges whose columns fit the transient budget (at least one sample each)."""
    step = max(1, min(n, MAX_COLS_BYTES // max(1, per_sample_bytes)))
    return [(start, min(n, start + step)) for start in range(0, n, step)]


def _padded(x: Tensor, geom: ConvGeometry) -> Tensor:
    """Zero-padded NCHW copy (negative padding crops, as the transposed geometry may need)."""
    ph, pw = geom.padding
    if ph or pw:
        return torch.constant_pad_nd(x.contiguous(), (pw, pw, ph, ph), 0.0)
    return x if x.is_contiguous() else x.contiguous()  # the strided views assume NCHW strides


def _columns(x: Tensor, geom: ConvGeometry) -> Tensor:
    """(N, groups, Cg*kh*kw, L): im2col in F.unfold's (channel, kh, kw) order, in one copy."""
    n, c, h, w = x.shape
    out_h, out_w = geom.out_size(h, w)
    if geom.pointwise:
        if geom.stride != (1, 1):
            x = x[:, :, :: geom.stride[0], :: geom.stride[1]]
        return x.reshape(n, geom.groups, c // geom.groups, out_h * out_w)
    x = _padded(x, geom)
    (dh, dw), (sh, sw) = geom.dilation, geom.stride
    hp, wp = x.shape[2:]
    taps = x.as_strided(
        (n, c, geom.kernel[0], geom.kernel[1], out_h, out_w),
        (c * hp * wp, hp * wp, dh * wp, dw, sh * wp, sw),
        x.storage_offset(),
    )
    return taps.reshape(n, geom.groups, -1, out_h * out_w)


def _columns_t(x: Tensor, geom: ConvGeometry) -> Tensor:
    """(groups, Cg*kh*kw, N*L): the columns laid out so the batch folds into the reduction axis."""
    n, c, h, w = x.shape
    out_h, out_w = geom.out_size(h, w)
    if geom.pointwise:
        if geom.stride != (1, 1):
            x = x[:, :, :: geom.stride[0], :: geom.stride[1]]
        return x.transpose(0, 1).reshape(geom.groups, c // geom.groups, n * out_h * out_w)
    x = _padded(x, geom)
    (dh, dw), (sh, sw) = geom.dilation, geom.stride
    hp, wp = x.shape[2:]
    taps = x.as_strided(
        (c, geom.kernel[0], geom.kernel[1], n, out_h, out_w),
        (hp * wp, dh * wp, dw, c * hp * wp, sh * wp, sw),
        x.storage_offset(),
    )
    return taps.reshape(geom.groups, -1, n * out_h * out_w)


def _batched_mm(weight: Tensor, cols: Tensor) -> Tensor:
    """(G, M, K) weight times (N, G, K, L) columns -> (N, G*M, L) as one bmm.

    torch.matmul would fold a 2-D @ 3-D product by transposing (copying) the columns and the
    result; bmm against an expanded (stride-0) weight reads the columns in place.
    """
    n, g, k, length = cols.shape
    m = weight.shape[1]
    if g == 1:
        return torch.bmm(weight.expand(n, m, k), cols.view(n, k, length))
    w = weight.expand(n, g, m, k).reshape(n * g, m, k)
    return torch.bmm(w, cols.reshape(n * g, k, length)).view(n, g * m, length)


def _correlate(x: Tensor, weight: Tensor, geom: ConvGeometry) -> Tensor:
    """The forward convolution (cross-correlation), NCHW output."""
    n, c, h, w = x.shape
    out_c, g = weight.shape[0], geom.groups
    out_h, out_w = geom.out_size(h, w)
    w_g = weight.reshape(g, out_c // g, -1)
    chunks = _chunks(n, c * geom.kernel[0] * geom.kernel[1] * out_h * out_w * x.element_size())
    if len(chunks) == 1:
        return _batched_mm(w_g, _columns(x, geom)).view(n, out_c, out_h, out_w)
    out = x.new_empty((n, out_c, out_h, out_w))
    for start, stop in chunks:
        out[start:stop] = _batched_mm(w_g, _columns(x[start:stop], geom)).view(-1, out_c, out_h, out_w)
    return out


def _weight_grad(x: Tensor, grad_out: Tensor, weight_shape: torch.Size, geom: ConvGeometry) -> Tensor:
    n, c = x.shape[:2]
    out_c, g = weight_shape[0], geom.groups
    length = grad_out.shape[2] * grad_out.shape[3]
    # Partial sums add up in at least float32 so batch splits do not cost half-precision accuracy.
    acc_dtype = torch.float64 if grad_out.dtype == torch.float64 else torch.float32
    per_sample = WGRAD_STRATEGY == "bmm" or (WGRAD_STRATEGY == "auto" and geom.pointwise)
    total: Tensor | None = None
    chunks = _chunks(n, c * geom.kernel[0] * geom.kernel[1] * length * x.element_size())
    for start, stop in chunks:
        rows = stop - start
        if len(chunks) > 1:
            x_part, go = x[start:stop], grad_out[start:stop].view(rows, g, out_c // g, length)
        else:
            x_part, go = x, grad_out.view(rows, g, out_c // g, length)
        if per_sample:
            cols = _columns(x_part, geom)
            part = torch.matmul(go, cols.transpose(-1, -2)).sum(0, dtype=acc_dtype)
        else:
            cols = _columns_t(x_part, geom)
            go_t = go.permute(1, 2, 0, 3).reshape(g, out_c // g, rows * length)
            part = torch.matmul(go_t, cols.transpose(1, 2))
        del cols  # free this chunk's columns before the next one allocates its own
        total = part if total is None else total.to(acc_dtype) + part
    assert total is not None
    return total.to(grad_out.dtype).reshape(weight_shape)


def _input_grad(grad_out: Tensor, weight: Tensor, x_shape: torch.Size, geom: ConvGeometry) -> Tensor:
    n, c, h, w = x_shape
    out_c, g = weight.shape[0], geom.groups
    kh, kw = geom.kernel
    if not geom.pointwise and geom.stride == (1, 1) and DGRAD_STRATEGY != "fold":
        flipped = weight.view(g, out_c // g, c // g, kh, kw).transpose(1, 2).flip(-2, -1)
        return _correlate(grad_out, flipped.reshape(c, out_c // g, kh, kw), _transposed(geom))
    out_h, out_w = grad_out.shape[2:]
    w_t = weight.reshape(g, out_c // g, -1).transpose(1, 2)
    chunks = _chunks(n, c * kh * kw * out_h * out_w * grad_out.element_size())
    grad_x = grad_out.new_empty((n, c, h, w)) if len(chunks) > 1 else None
    for start, stop in chunks:
        rows = stop - start
        go = grad_out if grad_x is None else grad_out[start:stop]
        cols = _batched_mm(w_t, go.view(rows, g, out_c // g, out_h * out_w))
        part = _col2im(cols, (rows, c, h, w), geom)
        if grad_x is None:
            return part
        grad_x[start:stop] = part
    assert grad_x is not None
    return grad_x


def _col2im(cols: Tensor, x_shape: tuple[int, int, int, int], geom: ConvGeometry) -> Tensor:
    """Sum the columns back onto the input grid (the adjoint of ``_columns``)."""
    n, c, h, w = x_shape
    if geom.pointwise:
        out_h, out_w = geom.out_size(h, w)
        sh, sw = geom.stride
        if geom.stride == (1, 1):
            return cols.view(n, c, h, w)
        grid = cols.new_zeros((n, c, h, w))
        grid[:, :, ::sh, ::sw] = cols.view(n, c, out_h, out_w)
        return grid
    return F.fold(cols, (h, w), geom.kernel, geom.dilation, geom.padding, geom.stride)
