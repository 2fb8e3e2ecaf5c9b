"""Patching nn.Conv2d: per model, globally, auto mode, undo, padding modes, and a CNN that trains."""

from __future__ import annotations

import copy
import io
import threading

import pytest

torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402

from gpuwatch.train import patch  # noqa: E402
from gpuwatch.train.patch import patch_conv2d  # noqa: E402

ORIGINAL_CONV_FORWARD = nn.Conv2d._conv_forward
ORIGINAL_FUNCTIONAL = F.conv2d


class _ConvCounter(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.convs = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if "conv" in str(func):
            self.convs += 1
        return func(*args, **(kwargs or {}))


def _native_convs(fn) -> int:
    with _ConvCounter() as counter:
        fn()
    return counter.convs


@pytest.fixture(autouse=True)
def _clean_patch_state():
    patch.reset_probes()
    yield
    patch.reset_probes()
    assert nn.Conv2d._conv_forward is ORIGINAL_CONV_FORWARD, "a test left the class hook installed"
    assert F.conv2d is ORIGINAL_FUNCTIONAL, "a test left F.conv2d patched"


def _cnn(padding_mode: str = "zeros") -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1, padding_mode=padding_mode),
        nn.BatchNorm2d(8),
        nn.ReLU(),
        nn.Conv2d(8, 16, 3, stride=2, padding=1, groups=2, bias=False),
        nn.BatchNorm2d(16),
        nn.ReLU(),
        nn.Conv2d(16, 16, 3, padding="same", groups=16),  # depthwise
        nn.Conv2d(16, 8, 1),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(8, 4),
    )


@pytest.mark.parametrize("padding_mode", ["zeros", "reflect", "replicate", "circular"])
def test_model_patch_matches_native_for_every_padding_mode(padding_mode):
    torch.manual_seed(0)
    model = _cnn(padding_mode).double()
    x = torch.randn(2, 3, 12, 11, dtype=torch.float64)
    ref = model(x)
    ref_grads = torch.autograd.grad(ref.square().sum(), list(model.parameters()))
    with patch_conv2d(model, "on"):
        assert _native_convs(lambda: model(x).sum().backward()) == 0
        out = model(x)
        grads = torch.autograd.grad(out.square().sum(), list(model.parameters()))
    torch.testing.assert_close(out, ref)
    for got, want in zip(grads, ref_grads, strict=True):
        torch.testing.assert_close(got, want)
    assert _native_convs(lambda: model(x)) > 0  # undone


def test_model_patch_leaves_other_models_alone_and_survives_copy_and_pickle():
    patched, other = _cnn(), _cnn()
    x = torch.randn(1, 3, 8, 8)
    handle = patch_conv2d(patched, "on")
    try:
        assert _native_convs(lambda: other(x)) > 0
        clone = copy.deepcopy(patched)
        assert _native_convs(lambda: clone(x)) == 0
        buffer = io.BytesIO()
        torch.save(patched, buffer)
        buffer.seek(0)
        loaded = torch.load(buffer, weights_only=False)
        torch.testing.assert_close(loaded(x), patched(x))
    finally:
        handle.undo()
    assert _native_convs(lambda: patched(x)) > 0


def test_global_patch_covers_new_modules_and_functional_and_undoes():
    x = torch.randn(1, 3, 8, 8)
    w = torch.randn(4, 3, 3, 3)
    with patch_conv2d(None, "on"):
        created_after = nn.Conv2d(3, 4, 3)
        assert _native_convs(lambda: created_after(x)) == 0
        assert _native_convs(lambda: F.conv2d(x, w, padding=1)) == 0
        torch.testing.assert_close(F.conv2d(x, w, padding=1), torch.conv2d(x, w, None, 1, 1))
    assert _native_convs(lambda: created_after(x)) > 0
    assert _native_convs(lambda: F.conv2d(x, w)) > 0


def test_off_mode_changes_nothing():
    model = _cnn()
    with patch_conv2d(model, "off"), patch_conv2d(None, "off"):
        assert nn.Conv2d._conv_forward is ORIGINAL_CONV_FORWARD
        assert _native_convs(lambda: model(torch.randn(1, 3, 8, 8))) > 0


def test_nested_global_patches_restore_the_outer_mode():
    outer = patch_conv2d(None, "auto")
    inner = patch_conv2d(None, "on")
    inner.undo()
    assert patch._STATE.global_mode == "auto"
    outer.undo()
    assert patch._STATE.global_mode is None


def _backward_is_multithreaded() -> bool:
    return torch.autograd.is_multithreading_enabled()


def test_backward_runs_on_the_calling_thread_while_patched():
    model = _cnn()
    with patch_conv2d(None, "off"):
        assert _backward_is_multithreaded()  # "off" touches nothing
    outer = patch_conv2d(model, "on")
    inner = patch_conv2d(None, "auto")
    assert not _backward_is_multithreaded()
    inner.undo()
    assert not _backward_is_multithreaded()  # the outer patch still holds it
    outer.undo()
    assert _backward_is_multithreaded()
    with patch_conv2d(model, "on", backward_on_caller=False):
        assert _backward_is_multithreaded()


def test_backward_setting_is_per_thread_and_undone_only_by_its_thread():
    handle = patch_conv2d(None, "on")
    seen = {}

    def other_thread() -> None:
        seen["multithreaded"] = _backward_is_multithreaded()
        handle.undo()  # undoes the patch; cannot reach this thread's setting

    try:
        worker = threading.Thread(target=other_thread)
        worker.start()
        worker.join()
        assert seen["multithreaded"] and patch._STATE.global_mode is None
        assert not _backward_is_multithreaded()
    finally:
        torch.autograd.set_multithreading_enabled(True)


def test_rejects_unknown_mode():
    with pytest.raises(ValueError):
        patch_conv2d(None, "maybe")  # type: ignore[arg-type]


def test_auto_keeps_native_when_it_works():
    model = _cnn()
    with patch_conv2d(model, "auto"):
        assert _native_convs(lambda: model(torch.randn(1, 3, 8, 8))) > 0


def test_auto_falls_back_when_native_raises(monkeypatch):
    calls = []

    def broken(*args, **kwargs):
        calls.append(args[0].dtype)
        raise RuntimeError("miopenStatusUnknownError")

    monkeypatch.setattr(patch, "native_conv2d", broken)
    model = _cnn()
    x = torch.randn(2, 3, 8, 8)
    with patch_conv2d(model, "auto"):
        assert _native_convs(lambda: model(x).sum().backward()) == 0
        model(x)
    assert calls == [torch.float32]  # probed once per device and dtype, then cached


def test_small_cnn_trains_to_the_same_loss_with_and_without_the_patch():
    def train(patched: bool) -> list[float]:
        torch.manual_seed(1)
        model = _cnn()
        target = torch.arange(16) % 4
        # Learnable: each class shifts the colour channels its own way.
        data = torch.randn(16, 3, 16, 16) + 2 * torch.randn(4, 3, 1, 1)[target]
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        handle = patch_conv2d(model, "on" if patched else "off")
        losses = []
        for _ in range(20):
            optimizer.zero_grad()
            loss = F.cross_entropy(model(data), target)
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
        handle.undo()
        return losses

    native, fallback = train(False), train(True)
    assert native[-1] < 0.5 * native[0]
    torch.testing.assert_close(fallback, native, rtol=1e-3, atol=1e-4)
