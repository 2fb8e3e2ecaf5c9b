"""The im2col fallback matches F.conv2d: forward, every gradient, dtypes, layouts and autocast."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402

from gpuwatch.train.conv2d.function import conv2d  # noqa: E402
from gpuwatch.train.conv2d.plan import DEFAULT_TUNING, Conv2dTuning  # noqa: E402

# (in_channels, out_channels, kernel, stride, padding, dilation, groups, bias)
GRID = [
    (4, 6, 3, 1, 1, 1, 1, True),
    (4, 6, 3, 2, 1, 1, 1, False),
    (4, 8, 3, 1, 0, 2, 2, True),
    (6, 6, 3, 1, 1, 1, 6, True),  # depthwise
    (4, 8, 5, 2, 2, 1, 4, False),  # depthwise with channel multiplier 2
    (4, 6, 1, 1, 0, 1, 1, True),  # pointwise: plain matmul
    (4, 6, 1, 2, 0, 1, 2, True),  # strided pointwise
    (4, 6, 1, 1, 1, 1, 1, False),  # 1x1 with padding takes the general path
    (3, 5, (3, 2), (2, 1), (1, 0), (1, 2), 1, True),
    (4, 6, (2, 4), 1, "same", 1, 2, True),  # even kernel: asymmetric 'same'
    (4, 6, 3, 1, "same", (2, 3), 1, False),
    (4, 6, 3, 1, "valid", 1, 1, True),
    (4, 6, 4, 3, (0, 2), 1, 1, True),  # stride that leaves input rows unused
    (4, 6, 3, 2, 2, 2, 2, True),  # strided, dilated, grouped
    (4, 6, 3, 1, 3, 1, 1, True),  # padding wider than the kernel reach
]


def _compare(x, w, b, stride, padding, dilation, groups, atol, tuning=DEFAULT_TUNING):
    leaves = [t for t in (x, w, b) if t is not None]
    ref = F.conv2d(x, w, b, stride, padding, dilation, groups)
    out = conv2d(x, w, b, stride, padding, dilation, groups, tuning=tuning)
    assert out.shape == ref.shape and out.dtype == ref.dtype
    assert out.is_contiguous(memory_format=torch.channels_last) == ref.is_contiguous(
        memory_format=torch.channels_last
    )
    torch.testing.assert_close(out, ref, atol=atol, rtol=atol)
    grad = torch.randn_like(ref)
    for got, want in zip(torch.autograd.grad(out, leaves, grad), torch.autograd.grad(ref, leaves, grad), strict=True):
        assert got.shape == want.shape and got.dtype == want.dtype
        torch.testing.assert_close(got, want, atol=atol, rtol=atol)


def _tensors(cin, cout, kernel, groups, bias, dtype=torch.float64, size=(9, 8), batch=2):
    kh, kw = (kernel, kernel) if isinstance(kernel, int) else kernel
    x = torch.randn(batch, cin, *size, dtype=dtype, requires_grad=True)
    w = torch.randn(cout, cin // groups, kh, kw, dtype=dtype, requires_grad=True)
    b = torch.randn(cout, dtype=dtype, requires_grad=True) if bias else None
    return x, w, b


# (weight-gradient strategy, input-gradient strategy, col2im_max_pixels): 0 sends every strided (or
# "fold") input gradient through the per-tap adds instead of col2im.
STRATEGIES = [("gemm", "transpose", 6400), ("bmm", "fold", 6400), ("auto", "transpose", 0), ("bmm", "fold", 0)]


def _tuning(wgrad, dgrad, col2im_max_pixels, **more):
    return Conv2dTuning(wgrad=wgrad, dgrad=dgrad, col2im_max_pixels=col2im_max_pixels, **more)


@pytest.mark.parametrize("strategy", STRATEGIES, ids=["-".join(map(str, s)) for s in STRATEGIES])
@pytest.mark.parametrize("case", GRID, ids=[str(i) for i in range(len(GRID))])
def test_matches_native_float64(case, strategy):
    cin, cout, kernel, stride, padding, dilation, groups, bias = case
    x, w, b = _tensors(cin, cout, kernel, groups, bias)
    _compare(x, w, b, stride, padding, dilation, groups, atol=1e-10, tuning=_tuning(*strategy))


@pytest.mark.parametrize("case", [GRID[0], GRID[3], GRID[6], GRID[8], GRID[9]], ids=str)
def test_gradcheck(case):
    cin, cout, kernel, stride, padding, dilation, groups, bias = case
    x, w, b = _tensors(cin, cout, kernel, groups, bias, size=(6, 5), batch=1)
    inputs = tuple(t for t in (x, w, b) if t is not None)

    def fn(*args):
        return conv2d(args[0], args[1], args[2] if bias else None, stride, padding, dilation, groups)

    assert torch.autograd.gradcheck(fn, inputs)


@pytest.mark.parametrize("case", [GRID[1], GRID[3], GRID[5], GRID[9]], ids=str)
def test_channels_last_input(case):
    cin, cout, kernel, stride, padding, dilation, groups, bias = case
    x, w, b = _tensors(cin, cout, kernel, groups, bias)
    x = x.detach().contiguous(memory_format=torch.channels_last).requires_grad_()
    _compare(x, w, b, stride, padding, dilation, groups, atol=1e-10)


@pytest.mark.parametrize(
    ("dtype", "atol"), [(torch.float32, 1e-4), (torch.float16, 2e-2), (torch.bfloat16, 1e-1)]
)
@pytest.mark.parametrize(("stride", "col2im_max_pixels"), [(1, 6400), (2, 6400), (2, 0)])
def test_low_precision_close_to_float64(dtype, atol, stride, col2im_max_pixels):
    x, w, b = _tensors(8, 8, 3, 2, True, size=(10, 10))
    low = [t.detach().to(dtype).requires_grad_() for t in (x, w, b)]
    out = conv2d(low[0], low[1], low[2], stride, 1, 1, 2, tuning=Conv2dTuning(col2im_max_pixels=col2im_max_pixels))
    assert out.dtype == dtype
    ref = F.conv2d(x, w, b, stride, 1, 1, 2)
    grad = torch.randn_like(ref)
    scale = ref.abs().max()
    torch.testing.assert_close(out.double() / scale, ref / scale, atol=atol, rtol=0)
    grads = torch.autograd.grad(out, low, grad.to(dtype))
    refs = torch.autograd.grad(ref, (x, w, b), grad)
    for got, want in zip(grads, refs, strict=True):
        assert got.dtype == dtype
        norm = want.abs().max()
        torch.testing.assert_close(got.double() / norm, want / norm, atol=atol, rtol=0)


def test_autocast_behaves_like_native():
    x, w, b = (t.detach().float().requires_grad_() for t in _tensors(4, 6, 3, 1, True))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        ref = F.conv2d(x, w, b, 1, 1)
        out = conv2d(x, w, b, 1, 1)
    assert out.dtype == ref.dtype == torch.bfloat16
    torch.testing.assert_close(out, ref, atol=5e-2, rtol=2e-2)
    grads = torch.autograd.grad(out.float().sum(), (x, w, b))
    refs = torch.autograd.grad(ref.float().sum(), (x, w, b))
    for got, want in zip(grads, refs, strict=True):
        assert got.dtype == torch.float32  # master weights keep float32 gradients
        torch.testing.assert_close(got, want, atol=0.3, rtol=3e-2)


def test_autocast_weight_gradient_leaves_the_conv_node_directly():
    # The weight is cast inside the Function: no ToCopyBackward node (and cast kernel) per layer.
    x, w, b = (t.detach().float().requires_grad_() for t in _tensors(4, 6, 3, 1, True))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = conv2d(x, w, b, 1, 1)
    leaves = {id(fn.variable) for fn, _ in out.grad_fn.next_functions if hasattr(fn, "variable")}
    assert leaves == {id(w), id(b)}


def test_unbatched_input():
    x, w, b = _tensors(4, 6, 3, 2, True, batch=1)
    x = x.detach()[0].requires_grad_()
    _compare(x, w, b, 1, 1, 1, 2, atol=1e-10)


def test_batch_chunking_matches():
    for strategy in STRATEGIES:
        tuning = _tuning(*strategy, max_cols_bytes=1)  # one sample per chunk
        x, w, b = _tensors(4, 6, 3, 2, True, batch=3)
        _compare(x, w, b, 2, 1, 1, 2, atol=1e-10, tuning=tuning)
        _compare(x, w, b, 1, 1, 1, 2, atol=1e-10, tuning=tuning)
        x, w, b = _tensors(4, 6, 1, 1, False, batch=3)
        _compare(x, w, b, 1, 0, 1, 1, atol=1e-10, tuning=tuning)


def test_rejects_what_native_rejects():
    x, w, _ = _tensors(4, 6, 3, 1, False)
    with pytest.raises(ValueError):
        conv2d(x, w, None, 2, "same")
    with pytest.raises(ValueError):
        conv2d(x, w, None, 1, "full")
    with pytest.raises(RuntimeError):
        conv2d(x, w, None, 1, 0, 1, 4)  # 4 channels, weight expects 4 per group
    with pytest.raises(RuntimeError):
        conv2d(x[:, :, :2, :2], w)  # kernel larger than input


class _OpRecorder(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.counts: dict[str, int] = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.counts[str(func)] = self.counts.get(str(func), 0) + 1
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("case", [GRID[1], GRID[3], GRID[5], GRID[9]], ids=str)
def test_never_dispatches_a_convolution(case):
    cin, cout, kernel, stride, padding, dilation, groups, bias = case
    x, w, b = _tensors(cin, cout, kernel, groups, bias, dtype=torch.float32)
    with _OpRecorder() as recorder:
        out = conv2d(x, w, b, stride, padding, dilation, groups)
        out.square().sum().backward()
    assert recorder.counts and not [op for op in recorder.counts if "conv" in op]


def test_meta_tensors_give_shapes():
    # Shape inference on the meta device (model summaries do this); autocast knows no "meta".
    x, w = torch.empty(2, 4, 9, 8, device="meta"), torch.empty(6, 4, 3, 3, device="meta")
    assert conv2d(x, w, None, 2, 1).shape == F.conv2d(x, w, None, 2, 1).shape == (2, 6, 5, 4)


def test_double_backward_is_refused_not_wrong():
    x, w, _ = _tensors(4, 6, 3, 1, False)
    (grad_x,) = torch.autograd.grad(conv2d(x, w, None, 1, 1).square().sum(), x, create_graph=True)
    with pytest.raises(RuntimeError, match="once_differentiable"):
        grad_x.sum().backward()


def test_stride1_builds_columns_once_per_direction():
    # Forward: the input's columns; backward: the output gradient's, shared by both gradients.
    x, w, b = _tensors(4, 6, 3, 1, True, dtype=torch.float32)
    with _OpRecorder() as recorder:
        conv2d(x, w, b, 1, 1).square().sum().backward()
    assert sum(n for op, n in recorder.counts.items() if "im2col" in op) == 2
