"""conv2d autotuning: the selection logic with fake timers, every path's parity, the cache key and store, the off
switch."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import textwrap

import pytest

torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402

from gpuwatch.train.conv2d import slow as conv_slow  # noqa: E402
from gpuwatch.train.conv2d import tune as conv_tune  # noqa: E402
from gpuwatch.train.conv2d.function import conv2d  # noqa: E402
from gpuwatch.train.conv2d.plan import DEFAULT_TUNING, Choice, Conv2dTuning, plan_for  # noqa: E402
from gpuwatch.train.conv2d.tune import Candidates, Tuner, pinned_timer, select, signature  # noqa: E402
from gpuwatch.train.conv2d.tune_store import TuneStore, environment  # noqa: E402
from gpuwatch.train.patch import patch_conv2d  # noqa: E402
from tests.support.paths import REPO  # noqa: E402


def _trial() -> None:
    return None


def _candidates(grads: bool = True) -> Candidates:
    return Candidates(
        forward={name: _trial for name in ("im2col", "matmul", "slow")},
        grads=grads,
        input_grad={name: _trial for name in ("transpose", "col2im", "taps", "slow")},
        weight_grad={name: _trial for name in ("bmm", "gemm", "slow")},
        both_grads={name: _trial for name in ("shared", "slow")},
        layers={"thnn": _trial, "pointwise": _trial},
        function=lambda choice: _trial,
    )


def _table_timer(fast: str, default: float = 1.0):
    """A fake timer: ``fast`` takes 0.1, every "layer.function" 0.5 (the Function wins over the other
    whole-layer routes unless one of them is ``fast``), both-gradient paths 5, the rest ``default``."""
    seen: list[str] = []

    def timer(label: str, trial) -> float:
        seen.append(label)
        if label == fast:
            return 0.1
        if label == "layer.function":
            return 0.5
        return 5.0 if label.startswith("both_grads.") else default

    return timer, seen


@pytest.mark.parametrize("label", ["forward.im2col", "forward.matmul", "forward.slow"])
def test_a_fake_timer_picks_each_forward_path(label):
    timer, _ = _table_timer(label)
    choice, times = select(_candidates(), timer)
    assert choice.route == "function" and choice.forward == label.partition(".")[2]
    assert times[label] == 0.1


@pytest.mark.parametrize("path", ["transpose", "col2im", "taps", "slow"])
def test_a_fake_timer_picks_each_input_gradient(path):
    choice, _ = select(_candidates(), _table_timer(f"input_grad.{path}")[0])
    assert choice.input_grad == path and choice.weight_grad in ("bmm", "gemm", "slow")


@pytest.mark.parametrize("path", ["bmm", "gemm", "slow"])
def test_a_fake_timer_picks_each_weight_gradient(path):
    choice, _ = select(_candidates(), _table_timer(f"weight_grad.{path}")[0])
    assert choice.weight_grad == path


@pytest.mark.parametrize("path", ["shared", "slow"])
def test_both_gradients_in_one_call_win_only_when_faster_than_the_two_apart(path):
    timer, _ = _table_timer("")

    def joint(label: str, trial) -> float:
        return 1.5 if label == f"both_grads.{path}" else timer(label, trial)  # 1.5 < 1.0 + 1.0

    assert select(_candidates(), joint)[0] == Choice("function", "im2col", path, path)

    def slower(label: str, trial) -> float:
        return 2.5 if label == f"both_grads.{path}" else timer(label, trial)

    assert select(_candidates(), slower)[0].input_grad != path


@pytest.mark.parametrize("route", ["thnn", "pointwise"])
def test_a_whole_layer_route_wins_over_the_best_function(route):
    choice, times = select(_candidates(), _table_timer(f"layer.{route}")[0])
    assert choice == Choice(route) and times["layer.function"] == 0.5


def test_forward_only_times_no_gradient():
    timer, seen = _table_timer("forward.slow")
    choice, _ = select(_candidates(grads=False), timer)
    assert choice == Choice("forward", "slow")
    assert all(label.startswith("forward.") for label in seen)


def test_a_path_that_fails_is_never_chosen():
    def timer(label: str, trial) -> float:
        if label == "forward.slow":
            raise RuntimeError("no kernel image is available for execution on the device")
        return 1.0 if label != "forward.im2col" else 2.0

    choice, times = select(_candidates(grads=False), timer)
    assert choice == Choice("forward", "matmul") and times["forward.slow"] == float("inf")


# -- on real tensors: every path, forced through the tuner, matches F.conv2d ----------------------


def _pin(tuner: Tuner, label: str) -> None:
    tuner.timer_for = lambda device: pinned_timer(label)
    plan_for.cache_clear()


# (in_channels, out_channels, kernel, stride, padding, dilation, groups, bias)
CASES = [
    (4, 6, 3, 1, 1, 1, 1, True),
    (4, 6, 3, 2, 1, 1, 1, False),
    (4, 8, 3, 1, 0, 2, 2, True),
    (6, 6, 3, 1, 1, 1, 6, True),  # depthwise
    (4, 6, 1, 1, 0, 1, 1, True),  # 1x1
    (4, 6, 2, 1, "same", (1, 2), 2, True),  # 'same' with an even kernel: extra zeros at one side
]
PATHS = [
    *[f"forward.{name}" for name in ("im2col", "matmul", "slow")],
    *[f"input_grad.{name}" for name in ("transpose", "col2im", "taps", "matmul", "slow")],
    *[f"weight_grad.{name}" for name in ("bmm", "gemm", "slow")],
    "both_grads.shared",
    "both_grads.slow",
    "layer.thnn",
    "layer.pointwise",
]


def _tensors(cin, cout, kernel, groups, bias, dtype=torch.float64, batch=2, size=(5, 6)):
    kh, kw = (kernel, kernel) if isinstance(kernel, int) else kernel
    x = torch.randn(batch, cin, *size, dtype=dtype, requires_grad=True)
    w = torch.randn(cout, cin // groups, kh, kw, dtype=dtype, requires_grad=True)
    b = torch.randn(cout, dtype=dtype, requires_grad=True) if bias else None
    return x, w, b


@pytest.mark.parametrize("label", PATHS)
def test_every_path_matches_native_float64(tuner, label):
    chosen = set()
    for cin, cout, kernel, stride, padding, dilation, groups, bias in CASES:
        _pin(tuner, label)
        x, w, b = _tensors(cin, cout, kernel, groups, bias)
        leaves = [t for t in (x, w, b) if t is not None]
        out = conv2d(x, w, b, stride, padding, dilation, groups)
        ref = F.conv2d(x, w, b, stride, padding, dilation, groups)
        torch.testing.assert_close(out, ref, atol=1e-10, rtol=1e-10)
        grad = torch.randn_like(ref)
        grads = torch.autograd.grad(out, leaves, grad)
        refs = torch.autograd.grad(ref, leaves, grad)
        for got, want in zip(grads, refs, strict=True):
            torch.testing.assert_close(got, want, atol=1e-10, rtol=1e-10)
        chosen.add(tuner.history[-1][1])
    kind, _, name = label.partition(".")
    used = {c.route if kind == "layer" else getattr(c, kind if kind != "both_grads" else "input_grad") for c in chosen}
    assert name in used  # the path ran for at least one case (it is not eligible for every one)


@pytest.mark.parametrize(("label", "case"), [("both_grads.slow", CASES[1]), ("layer.thnn", CASES[0]),
                                             ("layer.pointwise", CASES[4])])
def test_gradcheck_through_forced_paths(tuner, label, case):
    _pin(tuner, label)
    cin, cout, kernel, stride, padding, dilation, groups, bias = case
    x, w, b = _tensors(2, 3, kernel, groups, bias, batch=1, size=(4, 5))
    inputs = tuple(t for t in (x, w, b) if t is not None)

    def fn(*args):
        return conv2d(args[0], args[1], args[2] if bias else None, stride, padding, dilation, groups)

    assert torch.autograd.gradcheck(fn, inputs)


@pytest.mark.parametrize("label", ["forward.slow", "layer.thnn", "both_grads.slow"])
def test_channels_last_and_autocast_through_the_slow_paths(tuner, label):
    _pin(tuner, label)
    x, w, b = _tensors(4, 6, 3, 1, True, dtype=torch.float32)
    x = x.detach().contiguous(memory_format=torch.channels_last).requires_grad_()
    out = conv2d(x, w, b, 1, 1)
    assert out.is_contiguous(memory_format=torch.channels_last)
    ref = F.conv2d(x, w, b, 1, 1)
    torch.testing.assert_close(out, ref, atol=1e-4, rtol=1e-4)
    (grad_x,) = torch.autograd.grad(out.sum(), x)
    assert grad_x.is_contiguous(memory_format=torch.channels_last)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out, ref = conv2d(x, w, b, 1, 1), F.conv2d(x, w, b, 1, 1)
    assert out.dtype == ref.dtype == torch.bfloat16
    torch.testing.assert_close(out, ref, atol=5e-2, rtol=2e-2)
    grads = torch.autograd.grad(out.float().sum(), (x, w, b))
    refs = torch.autograd.grad(ref.float().sum(), (x, w, b))
    for got, want in zip(grads, refs, strict=True):
        assert got.dtype == torch.float32  # master weights keep float32 gradients
        torch.testing.assert_close(got, want, atol=0.3, rtol=3e-2)


@pytest.mark.parametrize("padding_mode", ["zeros", "reflect", "circular"])
def test_model_patch_with_tuned_paths_matches_for_padding_modes(tuner, padding_mode):
    tuner.timer_for = lambda device: pinned_timer("layer.thnn")
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1, padding_mode=padding_mode),
        nn.Conv2d(8, 8, 3, stride=2, padding=1, groups=2, bias=False),
        nn.Conv2d(8, 4, 1),
    ).double()
    x = torch.randn(2, 3, 9, 10, dtype=torch.float64)
    ref = model(x)
    ref_grads = torch.autograd.grad(ref.square().sum(), list(model.parameters()))
    with patch_conv2d(model, "on"):
        out = model(x)
        grads = torch.autograd.grad(out.square().sum(), list(model.parameters()))
    torch.testing.assert_close(out, ref)
    for got, want in zip(grads, ref_grads, strict=True):
        torch.testing.assert_close(got, want)
    assert {c.route for _, c, _ in tuner.history} >= {"thnn", "function"}  # groups=2 cannot take thnn


class _CudnnAtConvs(TorchDispatchMode):
    """Records, for every convolution op dispatched, whether cuDNN/MIOpen was enabled at that moment."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[tuple[str, bool]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if "conv" in str(func):
            self.seen.append((str(func), torch.backends.cudnn.enabled))
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("label", ["forward.slow", "input_grad.slow", "weight_grad.slow", "both_grads.slow",
                                   "layer.thnn"])
def test_pytorch_convolutions_run_with_cudnn_off_or_are_its_own_kernels(tuner, label):
    _pin(tuner, label)
    x, w, b = _tensors(4, 6, 3, 1, True, dtype=torch.float32)
    assert torch.backends.cudnn.enabled
    with _CudnnAtConvs() as recorder:
        conv2d(x, w, b, 1, 1).square().sum().backward()
    assert recorder.seen
    for op, cudnn_on in recorder.seen:
        # aten.convolution* pick their kernel from the global switch when they run: it must be off.
        # _slow_conv2d_* are slow_conv2d itself, whatever the switch says.
        assert not cudnn_on or "_slow_conv2d" in op, op
    assert torch.backends.cudnn.enabled  # switched back on


def test_vendor_off_nests_and_restores():
    with conv_slow.vendor_off():
        with conv_slow.vendor_off():
            assert not torch.backends.cudnn.enabled
        assert not torch.backends.cudnn.enabled
    assert torch.backends.cudnn.enabled


def test_slow_path_is_offered_only_where_pytorch_picks_its_own_kernel(monkeypatch):
    x, w, _ = _tensors(4, 6, 3, 1, False, dtype=torch.float32)
    plan = plan_for(x.shape, w.shape, x.dtype, 1, 1, 1, 1, DEFAULT_TUNING)
    assert conv_slow.vendor_free(x, w, plan)

    class Cudnn:
        name = "Cudnn"

    monkeypatch.setattr(torch._C, "_select_conv_backend", lambda *args: Cudnn())
    assert not conv_slow.vendor_free(x, w, plan)


# -- the off switch, the cache key, the store, the log ---------------------------------------------


def _refusing_timer(device):
    raise AssertionError("nothing may be timed")


def test_autotune_off_is_the_deterministic_choice_and_times_nothing(tuner):
    tuner.timer_for = _refusing_timer
    x, w, b = _tensors(4, 6, 3, 1, True)
    out = conv2d(x, w, b, 1, 1, tuning=Conv2dTuning(autotune=False))
    torch.testing.assert_close(out, F.conv2d(x, w, b, 1, 1))
    out.sum().backward()
    plan = plan_for(x.shape, w.shape, x.dtype, 1, 1, 1, 1, Conv2dTuning(autotune=False))
    assert list(plan.choices.values()) == [Choice("function", "im2col", "shared", "shared")]
    assert not tuner.history


def test_devices_without_a_timer_get_the_deterministic_choice(monkeypatch):
    monkeypatch.setattr(conv_tune.TUNER, "timer_for", _refusing_timer)  # the real tuner times "cuda" only
    plan_for.cache_clear()
    x, w, _ = _tensors(4, 6, 1, 1, False)
    conv2d(x, w).sum().backward()
    plan = plan_for(x.shape, w.shape, x.dtype, 1, 0, 1, 1, DEFAULT_TUNING)
    assert list(plan.choices.values()) == [Choice("pointwise")]


def test_each_signature_is_timed_once_per_process(tuner):
    calls = []

    def counting(device):
        timer = pinned_timer("layer.thnn")
        return lambda label, trial: calls.append(label) or timer(label, trial)

    tuner.timer_for = counting
    x, w, _ = _tensors(4, 6, 3, 1, False)
    for _ in range(3):
        conv2d(x, w, None, 1, 1).sum().backward()
    timed = len(calls)
    with torch.no_grad():
        conv2d(x, w, None, 1, 1)  # another signature: forward only
    assert len(tuner.history) == 2 and len(calls) > timed
    assert all(label.startswith("forward.") for label in calls[timed:])


def test_signature_tells_apart_everything_the_choice_depends_on():
    plan = plan_for((2, 4, 8, 8), (6, 4, 3, 3), torch.float32, 1, 1, 1, 1, DEFAULT_TUNING)
    base = dict(input_shape=(2, 4, 8, 8), weight_shape=(6, 4, 3, 3), dtype=torch.float16, weight_dtype=torch.float32,
                plan=plan, bias=True, needs=(True, True, True), layout="nchw", tuning=DEFAULT_TUNING)
    variants = [
        {"input_shape": (4, 4, 8, 8)},
        {"weight_shape": (8, 4, 3, 3)},
        {"dtype": torch.bfloat16},
        {"weight_dtype": torch.float16},
        {"plan": plan_for((2, 4, 8, 8), (6, 4, 3, 3), torch.float32, 2, 1, 1, 1, DEFAULT_TUNING)},  # stride
        {"plan": plan_for((2, 4, 8, 8), (6, 4, 3, 3), torch.float32, 1, 2, 1, 1, DEFAULT_TUNING)},  # padding
        {"plan": plan_for((2, 4, 8, 8), (6, 4, 3, 3), torch.float32, 1, 1, 2, 1, DEFAULT_TUNING)},  # dilation
        {"plan": plan_for((2, 4, 8, 8), (6, 2, 3, 3), torch.float32, 1, 1, 1, 2, DEFAULT_TUNING)},  # groups
        {"bias": False},
        {"needs": (False, True, True)},
        {"layout": "nhwc"},
        {"tuning": Conv2dTuning(max_cols_bytes=2**20)},
        {"tuning": Conv2dTuning(triton=True)},
    ]
    keys = {signature(**base)} | {signature(**{**base, **change}) for change in variants}
    assert len(keys) == len(variants) + 1
    assert signature(**base) == signature(**base)


def test_environment_names_device_driver_and_versions():
    env = environment(torch.device("cpu"))
    assert {"device", "driver", "torch", "cuda", "hip", "gpuwatch"} <= env.keys()
    assert env["torch"] == torch.__version__


def test_store_round_trip_and_environment_separation(tmp_path):
    env = environment(torch.device("cpu"))
    store = TuneStore(tmp_path, env)
    choice = Choice("function", "slow", "transpose", "gemm")
    store.put("sig", choice, {"forward.slow": 12e-6})
    assert TuneStore(tmp_path, env).get("sig") == choice
    assert TuneStore(tmp_path, env).get("other") is None
    document = json.loads(store.path.read_text())
    assert document["environment"] == env and document["choices"]["sig"]["times_us"] == {"forward.slow": 12.0}
    newer_torch = TuneStore(tmp_path, {**env, "torch": "99.0"})
    assert newer_torch.path != store.path and newer_torch.get("sig") is None


def test_store_ignores_a_damaged_file_with_one_warning(tmp_path, caplog):
    env = environment(torch.device("cpu"))
    store = TuneStore(tmp_path, env)
    store.path.write_text("{not json")
    with caplog.at_level(logging.WARNING, logger="gpuwatch.train"):
        assert store.get("sig") is None
    assert len(caplog.records) == 1 and "unreadable" in caplog.text
    store.put("sig", Choice("thnn"), {})
    assert TuneStore(tmp_path, env).get("sig") == Choice("thnn")


def test_a_later_process_reuses_the_disk_cache_without_timing(tuner, tmp_path):
    tuning = Conv2dTuning(cache_dir=str(tmp_path))
    _pin(tuner, "both_grads.slow")
    x, w, b = _tensors(4, 6, 3, 1, True)
    conv2d(x, w, b, 1, 1, tuning=tuning).sum().backward()
    assert len(tuner.history) == 1 and list(tmp_path.glob("conv2d-*.json"))

    later = Tuner(devices=frozenset({"cpu"}), timer_for=_refusing_timer)  # a new process: nothing in memory
    conv_tune.TUNER = later  # the fixture restores the original
    import gpuwatch.train.conv2d.function as conv2d_module

    conv2d_module.TUNER = later
    plan_for.cache_clear()
    out = conv2d(x, w, b, 1, 1, tuning=tuning)
    out.sum().backward()
    torch.testing.assert_close(out, F.conv2d(x, w, b, 1, 1))
    plan = plan_for(x.shape, w.shape, x.dtype, 1, 1, 1, 1, tuning)
    assert list(plan.choices.values()) == [Choice("function", "im2col", "slow", "slow")]


def test_one_debug_line_per_signature_with_choice_and_times(tuner, caplog):
    _pin(tuner, "layer.thnn")
    x, w, _ = _tensors(4, 6, 3, 1, False)
    with caplog.at_level(logging.DEBUG, logger="gpuwatch.train"):
        for _ in range(2):
            conv2d(x, w, None, 2, 1).sum().backward()
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("conv2d [")]
    assert len(lines) == 1
    assert "stride (2, 2)" in lines[0] and ": thnn;" in lines[0] and "layer.thnn 0 us" in lines[0]


def test_triton_kernels_match_native_in_the_interpreter():
    pytest.importorskip("triton")
    pytest.importorskip("numpy")
    script = textwrap.dedent(
        """
        import torch, torch.nn.functional as F
        from gpuwatch.train.conv2d import tune as conv_tune
        from gpuwatch.train.conv2d.function import conv2d
        from gpuwatch.train.conv2d.plan import Conv2dTuning, plan_for
        conv_tune.TUNER.devices = frozenset({"cpu"})
        tuning = Conv2dTuning(triton=True)
        for label in ("forward.triton", "input_grad.triton", "weight_grad.triton"):
            conv_tune.TUNER.timer_for = lambda device, label=label: conv_tune.pinned_timer(label)
            for cin, cout, k, s, p, d in ((4, 6, 3, 1, 1, 1), (3, 16, 3, 2, 1, 1), (4, 8, 3, 1, 0, 2),
                                          (5, 7, 1, 1, 0, 1)):
                plan_for.cache_clear()
                x = torch.randn(2, cin, 9, 8, requires_grad=True)
                w = torch.randn(cout, cin, k, k, requires_grad=True)
                out, ref = conv2d(x, w, None, s, p, d, tuning=tuning), F.conv2d(x, w, None, s, p, d)
                torch.testing.assert_close(out, ref, atol=1e-4, rtol=1e-4)
                grad = torch.randn_like(ref)
                for a, b in zip(torch.autograd.grad(out, (x, w), grad), torch.autograd.grad(ref, (x, w), grad)):
                    torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-4)
                assert label.partition(".")[2] in str(conv_tune.TUNER.history[-1][1])
        print("ok")
        """
    )
    env = {"TRITON_INTERPRET": "1", "PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"}
    result = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0 and result.stdout.strip().endswith("ok"), result.stderr[-2000:]
