"""The column kernels of the fallback convolution: im2col, col2im, a strided gather and batched products.

Most helpers are one or two device kernels, because the fallback is launch-bound on small-channel
CNNs (docs/training-patches.md). im2col and col2im run on the batch folded into the channel axis: ATen's
``im2col``/``col2im`` (what ``F.unfold``/``F.fold`` call) launch one kernel per sample, and with a
batch of one they launch one in all, padding included. None of this is a convolution operator, so
nothing reaches MIOpen or cuDNN.
"""

from __future__ import annotations

import functools

import torch
from torch import Tensor

from gpuwatch.train.conv2d.geometry import ConvGeometry

Pair = tuple[int, int]


def im2col(x: Tensor, kernel: Pair, dilation: Pair, padding: Pair, stride: Pair, length: int) -> Tensor:
    """(N, C*kh*kw, L) columns of a contiguous NCHW tensor, rows in F.unfold's (channel, kh, kw) order.

    ``length`` is L, the output pixels per sample. The result is preallocated: the functional
    ``im2col`` allocates an input-sized tensor and ``resize_``s it, which copies the old (unused)
    contents on the device and costs a second allocation.
    """
    n, c, h, w = x.shape
    cols = x.new_empty((1, n * c * kernel[0] * kernel[1], length))
    # out= exists at run time; torch's stub for the C function does not list it.
    torch._C._nn.im2col(x.view(1, n * c, h, w), kernel, dilation, padding, stride, out=cols)  # type: ignore[call-arg]
    return cols.view(n, -1, length)


def col2im(cols: Tensor, size: Pair, kernel: Pair, dilation: Pair, padding: Pair, stride: Pair) -> Tensor:
    """Sum (N, C*kh*kw, L) columns back onto an (N, C, H, W) grid: the adjoint of ``im2col``."""
    n, rows, length = cols.shape
    c = rows // (kernel[0] * kernel[1])
    grid = cols.new_empty((1, n * c, size[0], size[1]))
    torch._C._nn.col2im(cols.reshape(1, n * rows, length), size, kernel, dilation, padding, stride, out=grid)  # type: ignore[call-arg]
    return grid.view(n, c, size[0], size[1])


def col2im_taps(
    cols: Tensor, size: Pair, kernel: Pair, dilation: Pair, padding: Pair, stride: Pair, out_size: Pair
) -> Tensor:
    """``col2im`` as one strided add per kernel tap, summed in float32; for large strided layers.

    ATen's col2im kernel gathers every input pixel from several tap planes at once, which reads
    memory uncoalesced: on an H200 this cut the 16x16x320x320 stride-2 layer of the YOLOv8n
    benchmark from 1.67 to 1.10 ms of GPU time (forward + backward), the 16x32x160x160 one from
    0.84 to 0.52 ms. It takes kh*kw + 2 launches, so it only pays where the layer is GPU-bound.
    """
    n, rows, _ = cols.shape
    (kh, kw), (dh, dw), (ph, pw), (sh, sw), (out_h, out_w) = kernel, dilation, padding, stride, out_size
    c = rows // (kh * kw)
    acc_dtype = torch.promote_types(cols.dtype, torch.float32)
    grid = cols.new_zeros((n, c, size[0] + 2 * ph, size[1] + 2 * pw), dtype=acc_dtype)
    taps = cols.view(n, c, kh, kw, out_h, out_w)
    span_h, span_w = sh * (out_h - 1) + 1, sw * (out_w - 1) + 1
    for i in range(kh):
        for j in range(kw):
            grid[:, :, i * dh : i * dh + span_h : sh, j * dw : j * dw + span_w : sw].add_(taps[:, :, i, j])
    return grid[:, :, ph : ph + size[0], pw : pw + size[1]].to(cols.dtype, memory_format=torch.contiguous_format)


def columns_t(x: Tensor, geom: ConvGeometry) -> Tensor:
    """(groups, Cg*kh*kw, N*L): columns with the batch folded into the pixel axis, in one gather.

    The weight gradient reduces over batch and pixels together; with this layout that is a single
    matrix product (cuBLAS splits the long reduction), where im2col's (N, K, L) needs one per sample.
    """
    n, c, h, w = x.shape
    out_h, out_w = geom.out_size(h, w)
    (ph, pw), (dh, dw), (sh, sw) = geom.padding, geom.dilation, geom.stride
    if ph or pw:
        x = torch.constant_pad_nd(x, (pw, pw, ph, ph), 0.0)
    hp, wp = x.shape[2:]
    taps = x.as_strided(
        (c, geom.kernel[0], geom.kernel[1], n, out_h, out_w),
        (hp * wp, dh * wp, dw, c * hp * wp, sh * wp, sw),
        x.storage_offset(),
    )
    return taps.reshape(geom.groups, -1, n * out_h * out_w)


def batched_mm(weight: Tensor, cols: Tensor) -> Tensor:
    """(G, M, K) weight times (N, G*K, L) columns -> (N, G*M, L).

    One bmm against the weight expanded over the batch (stride 0): torch.matmul would fold a
    2-D @ 3-D product by transposing (copying) the columns and the result.
    """
    n, _, length = cols.shape
    g, m, k = weight.shape
    if g == 1:
        return torch.bmm(weight.expand(n, m, k), cols)
    w = weight.expand(n, g, m, k).reshape(n * g, m, k)
    return torch.bmm(w, cols.reshape(n * g, k, length)).view(n, g * m, length)


@functools.lru_cache(maxsize=256)
def flip_index(weight_shape: torch.Size, groups: int, device: torch.device) -> Tensor:
    """Indices that turn an (O, C/g, kh, kw) weight into the (C, O/g, kh, kw) flipped kernel, for ``take``.

    The input gradient of a stride-1 convolution correlates the output gradient with this kernel;
    one gather replaces a flip plus a transposing copy.
    """
    out_c, per_group, kh, kw = weight_shape
    index = torch.arange(out_c * per_group * kh * kw, device=device)
    index = index.view(groups, out_c // groups, per_group, kh, kw).transpose(1, 2).flip(-2, -1)
    return index.reshape(groups * per_group, out_c // groups, kh, kw)
