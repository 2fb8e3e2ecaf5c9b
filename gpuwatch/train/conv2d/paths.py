"""The MIOpen-free ways to compute each direction of a convolution, by name, for tune.py to choose from.

Every path takes contiguous NCHW tensors already in the compute dtype and returns NCHW results;
function.py handles layouts, autocast, bias and autograd. Directions:

* forward ``(x, w, plan) -> out``: ``im2col`` (columns + one bmm), ``matmul`` (1x1 stride 1: one bmm
  on a view of the input), ``slow`` (PyTorch's own non-cuDNN kernels, see below);
* input gradient ``(x, grad_out, w, flipped, plan) -> grad_x``: ``transpose`` (stride 1: correlation of
  grad_out with the flipped kernel), ``col2im`` and ``taps`` (bmm to columns, summed back by ATen's
  col2im or by one strided add per tap), ``matmul`` (1x1 stride 1), ``slow``;
* weight gradient ``(x, grad_out, w, plan) -> grad_w`` (float32 sums for half precision): ``bmm``
  (per-sample products summed), ``gemm`` (one product over batch and pixels), ``slow``;
* both gradients at once ``(x, grad_out, w, flipped, plan) -> (grad_x, grad_w)``: ``shared`` (stride 1:
  both from the output gradient's columns), ``slow`` (one ``convolution_backward`` call).

``triton`` (each direction one implicit-GEMM kernel, triton.py) is offered where Triton imports
and runs on the device.

``slow`` (slow.py) is PyTorch's own convolution with cuDNN/MIOpen switched off around the call.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Iterator
from types import ModuleType

import torch
from torch import Tensor

from gpuwatch.train.conv2d.columns import batched_mm, col2im, col2im_taps, columns_t, flip_index, im2col
from gpuwatch.train.conv2d.plan import Cols, Plan
from gpuwatch.train.conv2d.slow import both_grads_slow, forward_slow, input_grad_slow, weight_grad_slow

Forward = Callable[[Tensor, Tensor, Plan], Tensor]
InputGrad = Callable[[Tensor, Tensor, Tensor, "Tensor | None", Plan], Tensor]
WeightGrad = Callable[[Tensor, Tensor, Tensor, Plan], Tensor]
BothGrads = Callable[[Tensor, Tensor, Tensor, "Tensor | None", Plan], "tuple[Tensor, Tensor]"]


def triton_eligible(x: Tensor, plan: Plan) -> bool:
    """Whether the Triton kernels may be tried: Triton imports, the device is a GPU (or Triton's CPU
    interpreter is on, for tests), plain convolution in a dtype they take."""
    kernels = _triton()
    if kernels is None or plan.geom.groups != 1 or x.dtype not in kernels.DTYPES:
        return False
    return x.device.type == "cuda" or os.environ.get("TRITON_INTERPRET") == "1"


@functools.cache
def _triton() -> ModuleType | None:
    try:
        from gpuwatch.train.conv2d import triton as conv_triton
    except ImportError:  # no Triton (it is not a dependency), or one that does not load here
        return None
    return conv_triton


# -- forward -------------------------------------------------------------------------------------


def forward_im2col(x: Tensor, w: Tensor, plan: Plan) -> Tensor:
    return correlate(x, w, plan.geom.groups, plan.cols, plan.out_size, plan.chunk)


def forward_matmul(x: Tensor, w: Tensor, plan: Plan) -> Tensor:
    n, c, h, width = x.shape
    g, out_c = plan.geom.groups, w.shape[0]
    return batched_mm(w.reshape(g, out_c // g, c // g), x.view(n, c, h * width)).view(n, out_c, h, width)


def forward_triton(x: Tensor, w: Tensor, plan: Plan) -> Tensor:
    kernels = _triton()
    assert kernels is not None
    out: Tensor = kernels.forward(x, w, plan)
    return out


def correlate(x: Tensor, weight: Tensor, groups: int, cols: Cols, out_size: tuple[int, int], chunk: int) -> Tensor:
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


# -- input gradient ------------------------------------------------------------------------------


def flipped_kernel(w: Tensor, groups: int) -> Tensor:
    """The (C, O/g, kh, kw) flipped kernel the ``transpose`` and ``shared`` paths correlate with."""
    return torch.take(w, flip_index(w.shape, groups, w.device))


def input_grad_transpose(x: Tensor, grad_out: Tensor, w: Tensor, flipped: Tensor | None, plan: Plan) -> Tensor:
    assert flipped is not None and plan.dgrad_cols is not None
    return correlate(grad_out, flipped, plan.geom.groups, plan.dgrad_cols, plan.in_size, plan.dgrad_chunk)


def input_grad_col2im(x: Tensor, grad_out: Tensor, w: Tensor, flipped: Tensor | None, plan: Plan) -> Tensor:
    return _input_grad_columns(grad_out, w, plan, taps=False)


def input_grad_taps(x: Tensor, grad_out: Tensor, w: Tensor, flipped: Tensor | None, plan: Plan) -> Tensor:
    return _input_grad_columns(grad_out, w, plan, taps=True)


def input_grad_matmul(x: Tensor, grad_out: Tensor, w: Tensor, flipped: Tensor | None, plan: Plan) -> Tensor:
    n, out_c, h, width = grad_out.shape
    g = plan.geom.groups
    w_t = w.reshape(g, out_c // g, -1).transpose(1, 2)
    return batched_mm(w_t, grad_out.view(n, out_c, h * width)).view(n, -1, h, width)


def input_grad_triton(x: Tensor, grad_out: Tensor, w: Tensor, flipped: Tensor | None, plan: Plan) -> Tensor:
    kernels = _triton()
    assert kernels is not None
    grad_x: Tensor = kernels.input_grad(x, grad_out, w, flipped, plan)
    return grad_x


def _input_grad_columns(grad_out: Tensor, w: Tensor, plan: Plan, taps: bool) -> Tensor:
    g, out_c = plan.geom.groups, w.shape[0]
    n, chunk = grad_out.shape[0], plan.chunk
    w_t = w.reshape(g, out_c // g, -1).transpose(1, 2)
    go = grad_out.view(n, out_c, -1)

    def fold(cols: Tensor) -> Tensor:
        if taps:
            return col2im_taps(cols, plan.in_size, *plan.cols, plan.out_size)
        return col2im(cols, plan.in_size, *plan.cols)

    if chunk >= n:
        return fold(batched_mm(w_t, go))
    grad_x = grad_out.new_empty((n, w.shape[1] * g, *plan.in_size))
    for start in range(0, n, chunk):
        grad_x[start : start + chunk] = fold(batched_mm(w_t, go[start : start + chunk]))
    return grad_x


# -- weight gradient -----------------------------------------------------------------------------


def batch_sum(part: Tensor) -> Tensor:
    """Sum per-sample weight-gradient products over the batch, in float32 at least."""
    return part.sum(0, dtype=torch.promote_types(part.dtype, torch.float32))


def add_chunk(total: Tensor | None, part: Tensor) -> Tensor:
    """Add one batch chunk's weight gradient; chunks add up in float32 so batch splits do not cost
    half-precision accuracy."""
    return part if total is None else total.to(torch.promote_types(part.dtype, torch.float32)) + part


def _batch_chunks(x: Tensor, grad_out: Tensor, chunk: int) -> Iterator[tuple[Tensor, Tensor]]:
    """(input, grad_out) slices of at most ``chunk`` samples (the tensors themselves when one will do)."""
    n = x.shape[0]
    if chunk >= n:
        yield x, grad_out
        return
    for start in range(0, n, chunk):
        yield x[start : start + chunk], grad_out[start : start + chunk]


def weight_grad_bmm(x: Tensor, grad_out: Tensor, w: Tensor, plan: Plan) -> Tensor:
    """Per-sample products of grad_out with the input's columns (the input itself for 1x1), summed."""
    g, out_c = plan.geom.groups, grad_out.shape[1]
    length = plan.out_size[0] * plan.out_size[1]
    total: Tensor | None = None
    for x_part, go in _batch_chunks(x, grad_out, plan.chunk):
        rows = x_part.shape[0]
        cols = x_part if plan.pointwise else im2col(x_part, *plan.cols, length)
        part = torch.bmm(go.reshape(rows * g, out_c // g, length), cols.reshape(rows * g, -1, length).transpose(1, 2))
        total = add_chunk(total, batch_sum(part.view(rows, out_c, -1)))
    assert total is not None
    return total.view(out_c, -1, *plan.geom.kernel)


def weight_grad_gemm(x: Tensor, grad_out: Tensor, w: Tensor, plan: Plan) -> Tensor:
    """One product over batch and pixels: the columns gathered as (C*kh*kw, N*L)."""
    g, out_c = plan.geom.groups, grad_out.shape[1]
    length = plan.out_size[0] * plan.out_size[1]
    total: Tensor | None = None
    for x_part, go in _batch_chunks(x, grad_out, plan.chunk):
        rows = x_part.shape[0]
        go_t = go.view(rows, g, out_c // g, length).permute(1, 2, 0, 3).reshape(g, out_c // g, rows * length)
        total = add_chunk(total, torch.bmm(go_t, columns_t(x_part, plan.geom).transpose(1, 2)))
    assert total is not None
    return total.view(out_c, -1, *plan.geom.kernel)


def weight_grad_triton(x: Tensor, grad_out: Tensor, w: Tensor, plan: Plan) -> Tensor:
    kernels = _triton()
    assert kernels is not None
    grad_w: Tensor = kernels.weight_grad(x, grad_out, w, plan)
    return grad_w


# -- both gradients ------------------------------------------------------------------------------


def both_grads_shared(
    x: Tensor, grad_out: Tensor, w: Tensor, flipped: Tensor | None, plan: Plan
) -> tuple[Tensor, Tensor]:
    """Stride 1: both gradients from one im2col of grad_out (the columns of the input gradient).

    With those columns G (padding d*(k-1)-p), G[n, (o, a, b), q] = grad_out at q + d*((a, b) - (k-1)) + p,
    so the weight gradient W'[o, c, i, j] = sum_n,q x[n, c, q] * G[n, (o, k-1-i, k-1-j), q]: a per-sample
    product x[n] @ G[n]^T shaped like the flipped kernel, summed over the batch and flipped back.
    That saves building the input's columns a second time (one launch and k*k times the
    activation written, per layer).
    """
    assert plan.dgrad_cols is not None and flipped is not None  # shared columns are planned for stride 1 only
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
        part = torch.bmm(x_part.view(rows * g, c // g, length), cols.view(rows * g, -1, length).transpose(1, 2))
        total = add_chunk(total, batch_sum(part.view(rows, c, -1)))
    assert grad_x is not None and total is not None
    # total is (C, O/g*kh*kw), the flipped kernel's layout; the same gather maps it back.
    flipped_shape = torch.Size((c, flipped.shape[1], kh, kw))
    return grad_x, torch.take(total, flip_index(flipped_shape, g, total.device))


FORWARD: dict[str, Forward] = {
    "im2col": forward_im2col,
    "matmul": forward_matmul,
    "slow": forward_slow,
    "triton": forward_triton,
}
INPUT_GRAD: dict[str, InputGrad] = {
    "transpose": input_grad_transpose,
    "col2im": input_grad_col2im,
    "taps": input_grad_taps,
    "matmul": input_grad_matmul,
    "slow": input_grad_slow,
    "triton": input_grad_triton,
}
WEIGHT_GRAD: dict[str, WeightGrad] = {
    "bmm": weight_grad_bmm,
    "gemm": weight_grad_gemm,
    "slow": weight_grad_slow,
    "triton": weight_grad_triton,
}
BOTH_GRADS: dict[str, BothGrads] = {"shared": both_grads_shared, "slow": both_grads_slow}
