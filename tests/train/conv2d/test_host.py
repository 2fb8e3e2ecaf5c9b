"""The fallback's compiled host code (conv2d/host.py/.cpp): bitwise the Python paths' results, built once,
and the Python paths wherever it cannot run."""

from __future__ import annotations

import logging
import os
import re
import time

import pytest

torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402

from gpuwatch.train.conv2d import host as conv_host  # noqa: E402
from gpuwatch.train.conv2d.function import conv2d  # noqa: E402
from gpuwatch.train.conv2d.plan import Choice, Conv2dTuning, plan_for  # noqa: E402
from gpuwatch.train.conv2d.tune import pinned_timer  # noqa: E402

COMPILED, PYTHON = Conv2dTuning(host="compiled"), Conv2dTuning(host="python")


@pytest.fixture(scope="module")
def compiled() -> conv_host.HostOps:
    try:
        ops = conv_host.host_ops("compiled")
    except RuntimeError as exc:  # no C++ compiler or ninja on this machine
        pytest.skip(str(exc))
    assert ops is not None
    return ops


def _run(tuning, x, w, b, stride, padding, dilation, groups, grad_seed=1):
    """Output and gradients; ``tuning`` None: F.conv2d's."""
    leaves = [t for t in (x, w, b) if t is not None]
    if tuning is None:
        out = F.conv2d(x, w, b, stride, padding, dilation, groups)
    else:
        out = conv2d(x, w, b, stride, padding, dilation, groups, tuning=tuning)
    grad = torch.randn(out.shape, generator=torch.Generator().manual_seed(grad_seed), dtype=out.dtype)
    return [out, *torch.autograd.grad(out, leaves, grad)]


# (in, out, kernel, stride, padding, dilation, groups, bias)
GRID = [
    (4, 6, 3, 1, 1, 1, 1, True),
    (4, 6, 3, 2, 1, 1, 1, False),
    (4, 8, 3, 1, 0, 2, 2, True),
    (6, 6, 3, 1, 1, 1, 6, True),  # depthwise
    (4, 6, 1, 1, 0, 1, 1, True),  # 1x1
    (4, 6, 5, 2, 2, 1, 1, True),
    (4, 6, 2, 1, "same", (1, 2), 2, True),  # extra zeros at one side
]
# Every path of the Function that has a compiled form, and the pointwise route, forced in turn.
LABELS = [
    "forward.im2col", "forward.matmul", "input_grad.transpose", "input_grad.col2im", "input_grad.taps",
    "input_grad.matmul", "weight_grad.bmm", "weight_grad.gemm", "both_grads.shared", "layer.pointwise",
]


@pytest.mark.parametrize("label", LABELS)
@pytest.mark.parametrize("layout", ["nchw", "channels_last"])
def test_compiled_host_code_gives_the_python_paths_results_bit_for_bit(compiled, tuner, label, layout):
    for cin, cout, kernel, stride, padding, dilation, groups, bias in GRID:
        results = []
        for tuning in (COMPILED, PYTHON):
            tuner.timer_for = lambda device: pinned_timer(label)
            gen = torch.Generator().manual_seed(0)
            x = torch.randn(3, cin, 7, 6, generator=gen, dtype=torch.float64)
            if layout == "channels_last":
                x = x.to(memory_format=torch.channels_last)
            w = torch.randn(cout, cin // groups, kernel, kernel, generator=gen, dtype=torch.float64)
            b = torch.randn(cout, generator=gen, dtype=torch.float64) if bias else None
            leaves = [t.requires_grad_() for t in (x, w, b) if t is not None]
            results.append(_run(tuning, *leaves[:2], leaves[2] if bias else None, stride, padding, dilation, groups))
        ref = _run(None, *leaves[:2], leaves[2] if bias else None, stride, padding, dilation, groups)
        for got, want, native in zip(results[0], results[1], ref, strict=True):
            assert torch.equal(got, want)
            assert got.stride() == want.stride()  # channels_last in, channels_last out (and input gradient)
            torch.testing.assert_close(got, native, atol=1e-10, rtol=1e-10)


def test_gradcheck_and_chunked_columns(compiled):
    # Small enough for gradcheck's one backward per output element (it dominated the suite at 4x3x9x8).
    x = torch.randn(2, 3, 6, 5, dtype=torch.float64, requires_grad=True)
    w = torch.randn(4, 3, 3, 3, dtype=torch.float64, requires_grad=True)
    b = torch.randn(4, dtype=torch.float64, requires_grad=True)
    for wgrad, dgrad, stride in [("bmm", "transpose", 1), ("gemm", "fold", 1), ("auto", "transpose", 1),
                                 ("bmm", "transpose", 2), ("gemm", "transpose", 2)]:
        # One sample per chunk, and taps above one pixel: every loop of the C++ paths.
        tuning = Conv2dTuning(host="compiled", autotune=False, max_cols_bytes=1, wgrad=wgrad, dgrad=dgrad,
                              col2im_max_pixels=1 if wgrad == "gemm" else 6400)
        assert torch.autograd.gradcheck(
            lambda a, c, d, stride=stride, tuning=tuning: conv2d(a, c, d, stride, 1, tuning=tuning), (x, w, b)
        )


def test_autocast_keeps_float32_master_gradients(compiled):
    x = torch.randn(2, 4, 8, 8)
    w = torch.randn(6, 4, 3, 3, requires_grad=True)
    grads = []
    for tuning in (COMPILED, PYTHON):
        w.grad = None
        with torch.autocast("cpu", dtype=torch.bfloat16):
            out = conv2d(x, w, None, 1, 1, tuning=tuning)
        assert out.dtype == torch.bfloat16
        out.float().sum().backward()
        assert w.grad is not None and w.grad.dtype == torch.float32
        grads.append(w.grad.clone())
    assert torch.equal(grads[0], grads[1])


@pytest.mark.parametrize("tuning", [COMPILED, PYTHON], ids=["compiled", "python"])
def test_double_backward_is_refused_not_wrong(compiled, tuning):
    x = torch.randn(2, 3, 6, 6, dtype=torch.float64, requires_grad=True)
    w = torch.randn(4, 3, 3, 3, dtype=torch.float64, requires_grad=True)
    tuning = Conv2dTuning(host=tuning.host, autotune=False)
    out = conv2d(x, w, None, 1, 1, tuning=tuning)
    (grad_x,) = torch.autograd.grad(out.square().sum(), x, create_graph=True)  # grad_out needs a graph too
    with pytest.raises(RuntimeError, match="once_differentiable"):
        grad_x.sum().backward()


@pytest.mark.parametrize("tuning", [COMPILED, PYTHON], ids=["compiled", "python"])
def test_one_gradient_of_a_layer_whose_choice_computes_both(compiled, tuning):
    """autograd.grad(..., inputs=[x]) on a layer that chose the shared path: only the input gradient."""
    x = torch.randn(2, 3, 6, 6, dtype=torch.float64, requires_grad=True)
    w = torch.randn(4, 3, 3, 3, dtype=torch.float64, requires_grad=True)
    tuning = Conv2dTuning(host=tuning.host, autotune=False)  # the fixed choice: shared for stride 1
    (got,) = torch.autograd.grad(conv2d(x, w, None, 1, 1, tuning=tuning).sum(), [x])
    (want,) = torch.autograd.grad(F.conv2d(x, w, None, 1, 1).sum(), [x])
    torch.testing.assert_close(got, want)


def test_paths_without_a_compiled_form_run_the_python_function(compiled):
    plan = plan_for((2, 3, 6, 6), (4, 3, 3, 3), torch.float64, 1, 1, 1, 1, COMPILED)
    assert conv_host.spec(plan, Choice("function", "slow", "transpose", "bmm")) is None
    assert conv_host.spec(plan, Choice("function", "im2col", "triton", "bmm")) is None
    spec = conv_host.spec(plan, Choice("function", "im2col", "shared", "shared"))
    assert spec is not None and len(spec) == len(conv_host.SPEC_FIELDS)
    fields = dict(zip(conv_host.SPEC_FIELDS, spec, strict=True))
    assert (fields["kh"], fields["ph"], fields["tph"], fields["input_grad"], fields["weight_grad"]) == (3, 1, 1, 5, 3)


def test_the_spec_layout_is_the_cpp_enum():
    """The two homes of the spec's layout (conv2d/host.py's SPEC_FIELDS, conv2d/host.cpp's Field) in step."""
    source = conv_host._SOURCE.read_text()
    enum = re.search(r"enum Field : int64_t \{([^}]*)\}", source)
    assert enum is not None
    names = [name.strip().lower() for name in enum.group(1).replace("\n", " ").split(",") if name.strip()]
    assert names == [*conv_host.SPEC_FIELDS, "spec_len"]


def test_auto_keeps_the_python_paths_with_one_warning_where_it_cannot_build(monkeypatch, caplog):
    def no_compiler() -> conv_host.HostOps:
        raise OSError("c++: command not found")

    monkeypatch.setattr(conv_host, "_build", no_compiler)
    conv_host._load.cache_clear()
    try:
        with caplog.at_level(logging.WARNING, logger="gpuwatch.train"):
            assert conv_host.host_ops("auto") is None
            assert conv_host.host_ops("auto") is None  # tried once per process
        assert [r.getMessage() for r in caplog.records] == [
            "gpuwatch conv2d fallback: host code not compiled (c++: command not found); using the Python paths, "
            "slower on a host-bound step"
        ]
        with pytest.raises(RuntimeError, match="^gpuwatch conv2d fallback: its host code did not compile: c\\+\\+"):
            conv_host.host_ops("compiled")
        x, w = torch.randn(1, 2, 5, 5), torch.randn(3, 2, 3, 3)
        torch.testing.assert_close(conv2d(x, w, None, 1, 1), F.conv2d(x, w, None, 1, 1))
    finally:
        conv_host._load.cache_clear()


def test_python_mode_and_torch_compile_tracing_never_build(monkeypatch):
    def must_not_build() -> conv_host.HostOps:
        raise AssertionError("built")

    monkeypatch.setattr(conv_host, "_build", must_not_build)
    conv_host._load.cache_clear()
    try:
        assert conv_host.host_ops("python") is None
        monkeypatch.setattr(torch.compiler, "is_compiling", lambda: True)
        assert conv_host.host_ops("auto") is None
    finally:
        conv_host._load.cache_clear()


def test_the_build_goes_to_torch_extensions_dir_or_the_user_cache(monkeypatch, tmp_path):
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path / "ext"))
    assert conv_host.build_root() == tmp_path / "ext"
    monkeypatch.delenv("TORCH_EXTENSIONS_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    assert conv_host.build_root() == tmp_path / "cache" / "gpuwatch"


def test_a_lock_left_by_a_killed_builder_is_dropped_a_live_one_kept(tmp_path):
    stale, live = tmp_path / "stale", tmp_path / "live"
    stale.touch()
    live.touch()
    os.utime(stale, (time.time() - 3600, time.time() - 3600))
    conv_host._drop_stale_lock(stale)
    conv_host._drop_stale_lock(live)
    conv_host._drop_stale_lock(tmp_path / "absent")
    assert not stale.exists() and live.exists()


def test_the_tuner_keeps_compiled_and_python_measurements_apart(compiled, tuner):
    tuner.timer_for = lambda device: pinned_timer("forward.im2col")
    x, w = torch.randn(1, 2, 5, 5, requires_grad=True), torch.randn(3, 2, 3, 3, requires_grad=True)
    conv2d(x, w, None, 1, 1, tuning=COMPILED)
    conv2d(x, w, None, 1, 1, tuning=PYTHON)
    signatures = [signature for signature, _, _ in tuner.history]
    assert len(signatures) == 2 and signatures[0] == signatures[1] + " compiled"
