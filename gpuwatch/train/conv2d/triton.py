"""Implicit-GEMM convolution kernels in Triton: each direction in one launch, columns never stored.

Where Triton runs (it does not on every GPU: its AMD backend has no RDNA1, so not the RX 5600 XT),
these are one more candidate for tune.py, which measures them like any other path; a kernel
that fails to compile or launch is simply not chosen. Only plain convolutions (groups 1) in
float32/float16/bfloat16, NCHW contiguous; any stride, padding and dilation.

* forward: rows are output pixels (n, oh, ow), columns output channels, the reduction runs over the
  kernel taps and input channels, gathering the input at ``oh*s - p + i*d``;
* input gradient: rows are input pixels, columns input channels, the reduction over taps and output
  channels, gathering grad_out where ``ih + p - i*d`` is a multiple of the stride (the transposed
  convolution, for any stride);
* weight gradient: per tap, (out channels x in channels) products reduced over batch and pixels,
  split over ``split`` programs along that reduction into float32 partial sums added at the end.

Accumulation is float32; float32 inputs use TF32 exactly when ``torch.backends.cuda.matmul.allow_tf32``
allows it for the matrix products of the other paths.
"""

from __future__ import annotations

import functools

import torch
import triton
import triton.language as tl
from torch import Tensor

from gpuwatch.train.conv2d.plan import Plan

DTYPES = (torch.float32, torch.float16, torch.bfloat16)


@triton.jit
def _forward_kernel(
    x, w, out, N, C, H, W, OC, OH, OW, SH, SW, PH, PW, DH, DW,
    KH: tl.constexpr, KW: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    PRECISION: tl.constexpr,
):
    m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    o = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    length = OH * OW
    n = m // length
    p = m % length
    oh = p // OW
    ow = p % OW
    m_ok = m < N * length
    o_ok = o < OC
    x_n = x + n.to(tl.int64) * C * H * W
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for i in tl.static_range(KH):
        ih = oh * SH - PH + i * DH
        h_ok = m_ok & (ih >= 0) & (ih < H)
        for j in tl.static_range(KW):
            iw = ow * SW - PW + j * DW
            ok = h_ok & (iw >= 0) & (iw < W)
            x_tap = x_n + ih * W + iw
            w_tap = w + o * (C * KH * KW) + i * KW + j
            for c0 in range(0, C, BLOCK_K):
                c = c0 + tl.arange(0, BLOCK_K)
                c_ok = c < C
                a = tl.load(x_tap[:, None] + c[None, :] * (H * W), mask=ok[:, None] & c_ok[None, :], other=0.0)
                b = tl.load(w_tap[None, :] + c[:, None] * (KH * KW), mask=c_ok[:, None] & o_ok[None, :], other=0.0)
                acc += tl.dot(a, b, input_precision=PRECISION)
    target = out + n.to(tl.int64)[:, None] * OC * length + o[None, :] * length + p[:, None]
    tl.store(target, acc.to(out.dtype.element_ty), mask=m_ok[:, None] & o_ok[None, :])


@triton.jit
def _input_grad_kernel(
    go, w, gx, N, C, H, W, OC, OH, OW, SH, SW, PH, PW, DH, DW,
    KH: tl.constexpr, KW: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    PRECISION: tl.constexpr,
):
    m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    c = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    area = H * W
    n = m // area
    q = m % area
    ih = q // W
    iw = q % W
    m_ok = m < N * area
    c_ok = c < C
    go_n = go + n.to(tl.int64) * OC * OH * OW
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for i in tl.static_range(KH):
        th = ih + PH - i * DH  # = oh * SH where an output row reads this input row through tap i
        oh = th // SH
        h_ok = m_ok & (th >= 0) & (th % SH == 0) & (oh < OH)
        for j in tl.static_range(KW):
            tw = iw + PW - j * DW
            ow = tw // SW
            ok = h_ok & (tw >= 0) & (tw % SW == 0) & (ow < OW)
            go_tap = go_n + oh * OW + ow
            w_tap = w + c * (KH * KW) + i * KW + j
            for o0 in range(0, OC, BLOCK_K):
                oc = o0 + tl.arange(0, BLOCK_K)
                oc_ok = oc < OC
                a = tl.load(go_tap[:, None] + oc[None, :] * (OH * OW), mask=ok[:, None] & oc_ok[None, :], other=0.0)
                b = tl.load(w_tap[None, :] + oc[:, None] * (C * KH * KW), mask=oc_ok[:, None] & c_ok[None, :],
                            other=0.0)
                acc += tl.dot(a, b, input_precision=PRECISION)
    target = gx + n.to(tl.int64)[:, None] * C * area + c[None, :] * area + q[:, None]
    tl.store(target, acc.to(gx.dtype.element_ty), mask=m_ok[:, None] & c_ok[None, :])


@triton.jit
def _weight_grad_kernel(
    x, go, part, N, C, H, W, OC, OH, OW, SH, SW, PH, PW, DH, DW, PER_SPLIT,
    KH: tl.constexpr, KW: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    PRECISION: tl.constexpr,
):
    o = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    tap = tl.program_id(1) % (KH * KW)
    c = (tl.program_id(1) // (KH * KW)) * BLOCK_N + tl.arange(0, BLOCK_N)
    split = tl.program_id(2)
    i = tap // KW
    j = tap % KW
    o_ok = o < OC
    c_ok = c < C
    length = OH * OW
    start = split * PER_SPLIT
    end = tl.minimum(start + PER_SPLIT, N * length)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for p0 in range(start, end, BLOCK_K):
        pp = p0 + tl.arange(0, BLOCK_K)
        p_ok = pp < end
        n = (pp // length).to(tl.int64)
        q = pp % length
        ih = (q // OW) * SH - PH + i * DH
        iw = (q % OW) * SW - PW + j * DW
        x_ok = p_ok & (ih >= 0) & (ih < H) & (iw >= 0) & (iw < W)
        a = tl.load(go + n[None, :] * OC * length + o[:, None] * length + q[None, :],
                    mask=o_ok[:, None] & p_ok[None, :], other=0.0)
        b = tl.load(x + n[:, None] * C * H * W + c[None, :] * (H * W) + (ih * W + iw)[:, None],
                    mask=x_ok[:, None] & c_ok[None, :], other=0.0)
        acc += tl.dot(a, b, input_precision=PRECISION)
    k = C * KH * KW
    target = part + split.to(tl.int64) * OC * k + o[:, None] * k + c[None, :] * (KH * KW) + tap
    tl.store(target, acc, mask=o_ok[:, None] & c_ok[None, :])


@functools.lru_cache(maxsize=16)
def _processors(device: torch.device) -> int:
    return torch.cuda.get_device_properties(device).multi_processor_count if device.type == "cuda" else 1


def _block(size: int, most: int) -> int:
    """A power of two covering ``size``, between 16 (tl.dot's least) and ``most``."""
    return max(16, min(most, triton.next_power_of_2(size)))


def _precision(dtype: torch.dtype) -> str:
    return "tf32" if dtype == torch.float32 and torch.backends.cuda.matmul.allow_tf32 else "ieee"


def _geometry(plan: Plan) -> tuple[int, ...]:
    g = plan.geom
    return (*g.stride, *g.padding, *g.dilation)


def forward(x: Tensor, w: Tensor, plan: Plan) -> Tensor:
    n, c, h, width = x.shape
    o = w.shape[0]
    (oh, ow), (kh, kw) = plan.out_size, plan.geom.kernel
    out = x.new_empty((n, o, oh, ow))
    block_k = _block(c, 32 if x.element_size() < 4 else 16)
    block_n = _block(o, 64)
    grid = (triton.cdiv(n * oh * ow, 128), triton.cdiv(o, block_n))
    _forward_kernel[grid](x, w, out, n, c, h, width, o, oh, ow, *_geometry(plan), KH=kh, KW=kw, BLOCK_M=128,
                          BLOCK_N=block_n, BLOCK_K=block_k, PRECISION=_precision(x.dtype))
    return out


def input_grad(x: Tensor, grad_out: Tensor, w: Tensor, flipped: Tensor | None, plan: Plan) -> Tensor:
    n, o, oh, ow = grad_out.shape
    c, (h, width), (kh, kw) = w.shape[1], plan.in_size, plan.geom.kernel
    grad_x = grad_out.new_empty((n, c, h, width))
    block_k = _block(o, 32 if grad_out.element_size() < 4 else 16)
    block_n = _block(c, 64)
    grid = (triton.cdiv(n * h * width, 128), triton.cdiv(c, block_n))
    _input_grad_kernel[grid](grad_out, w, grad_x, n, c, h, width, o, oh, ow, *_geometry(plan), KH=kh, KW=kw,
                             BLOCK_M=128, BLOCK_N=block_n, BLOCK_K=block_k, PRECISION=_precision(w.dtype))
    return grad_x


def weight_grad(x: Tensor, grad_out: Tensor, w: Tensor, plan: Plan) -> Tensor:
    n, c, h, width = x.shape
    o, (oh, ow), (kh, kw) = grad_out.shape[1], plan.out_size, plan.geom.kernel
    block_m, block_n, block_k = _block(o, 64), _block(c, 64), 64 if x.element_size() < 4 else 32
    tiles = triton.cdiv(o, block_m) * triton.cdiv(c, block_n) * kh * kw
    total = n * oh * ow
    # Enough programs to fill the GPU several times over, each reducing a run of whole blocks.
    programs = 4 * _processors(x.device)
    split = max(1, min(triton.cdiv(programs, tiles), triton.cdiv(total, 4 * block_k)))
    per_split = triton.cdiv(triton.cdiv(total, split), block_k) * block_k
    split = triton.cdiv(total, per_split)
    part = x.new_empty((split, o, c * kh * kw), dtype=torch.float32)
    grid = (triton.cdiv(o, block_m), triton.cdiv(c, block_n) * kh * kw, split)
    _weight_grad_kernel[grid](x, grad_out, part, n, c, h, width, o, oh, ow, *_geometry(plan), per_split, KH=kh,
                              KW=kw, BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k, PRECISION=_precision(x.dtype))
    total_w = part[0] if split == 1 else part.sum(0)
    return total_w.view(o, c, kh, kw)
