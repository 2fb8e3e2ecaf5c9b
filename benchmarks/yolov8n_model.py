"""A YOLOv8n-shaped network (backbone, PAN neck, detect-head conv branches) and a synthetic train loop.

Built here, layer for layer after Ultralytics' yolov8n.yaml (width 0.25, depth 0.33), so benchmarks
and end-to-end checks need no hub download and no ultralytics install. Benchmark scaffolding: the
scripts beside it import it; the installed package does not ship it. The loss is a stand-in (mean
square of the head outputs): the point is the convolution workload of a real detector training step.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor, nn


class ConvBnAct(nn.Module):
    """Ultralytics' ``Conv``: Conv2d without bias, BatchNorm, SiLU."""

    def __init__(self, c_in: int, c_out: int, k: int = 1, s: int = 1) -> None:
        super().__init__()
        self.conv = nn.Conv2d(c_in, c_out, k, s, k // 2, bias=False)
        self.bn = nn.BatchNorm2d(c_out, eps=1e-3, momentum=0.03)
        self.act = nn.SiLU(inplace=True)

    def forward(self, x: Tensor) -> Tensor:
        return self.act(self.bn(self.conv(x)))


class Bottleneck(nn.Module):
    def __init__(self, c: int, shortcut: bool) -> None:
        super().__init__()
        self.cv1, self.cv2 = ConvBnAct(c, c, 3), ConvBnAct(c, c, 3)
        self.add = shortcut

    def forward(self, x: Tensor) -> Tensor:
        y = self.cv2(self.cv1(x))
        return x + y if self.add else y


class C2f(nn.Module):
    def __init__(self, c_in: int, c_out: int, n: int, shortcut: bool) -> None:
        super().__init__()
        self.c = c_out // 2
        self.cv1 = ConvBnAct(c_in, 2 * self.c, 1)
        self.cv2 = ConvBnAct((2 + n) * self.c, c_out, 1)
        self.m = nn.ModuleList(Bottleneck(self.c, shortcut) for _ in range(n))

    def forward(self, x: Tensor) -> Tensor:
        ys = list(self.cv1(x).chunk(2, 1))
        ys.extend(m(ys[-1]) for m in self.m)
        return self.cv2(torch.cat(ys, 1))


class SPPF(nn.Module):
    def __init__(self, c_in: int, c_out: int) -> None:
        super().__init__()
        hidden = c_in // 2
        self.cv1, self.cv2 = ConvBnAct(c_in, hidden, 1), ConvBnAct(hidden * 4, c_out, 1)
        self.pool = nn.MaxPool2d(5, 1, 2)

    def forward(self, x: Tensor) -> Tensor:
        ys = [self.cv1(x)]
        ys.extend(self.pool(ys[-1]) for _ in range(3))
        return self.cv2(torch.cat(ys, 1))


class DetectBranches(nn.Module):
    """The conv part of Ultralytics' ``Detect``: box (4*reg_max) and class branches per level."""

    def __init__(self, channels: tuple[int, ...], nc: int = 80, reg_max: int = 16) -> None:
        super().__init__()
        c2, c3 = max(16, channels[0] // 4, reg_max * 4), max(channels[0], min(nc, 100))
        self.box = nn.ModuleList(
            nn.Sequential(ConvBnAct(c, c2, 3), ConvBnAct(c2, c2, 3), nn.Conv2d(c2, 4 * reg_max, 1)) for c in channels
        )
        self.cls = nn.ModuleList(
            nn.Sequential(ConvBnAct(c, c3, 3), ConvBnAct(c3, c3, 3), nn.Conv2d(c3, nc, 1)) for c in channels
        )

    def forward(self, feats: list[Tensor]) -> list[Tensor]:
        return [torch.cat((b(x), c(x)), 1) for x, b, c in zip(feats, self.box, self.cls, strict=True)]


class YoloV8Shape(nn.Module):
    """yolov8n by default; ``width``/``depth`` give the other sizes (s: 0.5/0.33, m: 0.75/0.67)."""

    def __init__(self, width: float = 0.25, depth: float = 0.33, nc: int = 80, max_channels: int = 1024) -> None:
        super().__init__()

        def ch(c: int) -> int:
            return int(-(-min(c, max_channels) * width // 8) * 8)  # round up to a multiple of 8

        def n(k: int) -> int:
            return max(round(k * depth), 1)

        c1, c2, c3, c4, c5 = ch(64), ch(128), ch(256), ch(512), ch(1024)
        self.stem = nn.Sequential(ConvBnAct(3, c1, 3, 2), ConvBnAct(c1, c2, 3, 2), C2f(c2, c2, n(3), True))
        self.p3 = nn.Sequential(ConvBnAct(c2, c3, 3, 2), C2f(c3, c3, n(6), True))
        self.p4 = nn.Sequential(ConvBnAct(c3, c4, 3, 2), C2f(c4, c4, n(6), True))
        self.p5 = nn.Sequential(ConvBnAct(c4, c5, 3, 2), C2f(c5, c5, n(3), True), SPPF(c5, c5))
        self.up = nn.Upsample(scale_factor=2.0, mode="nearest")
        self.top_p4 = C2f(c5 + c4, c4, n(3), False)
        self.out_p3 = C2f(c4 + c3, c3, n(3), False)
        self.down_p3 = ConvBnAct(c3, c3, 3, 2)
        self.out_p4 = C2f(c3 + c4, c4, n(3), False)
        self.down_p4 = ConvBnAct(c4, c4, 3, 2)
        self.out_p5 = C2f(c4 + c5, c5, n(3), False)
        self.detect = DetectBranches((c3, c4, c5), nc)

    def forward(self, x: Tensor) -> list[Tensor]:
        p3 = self.p3(self.stem(x))
        p4 = self.p4(p3)
        p5 = self.p5(p4)
        t4 = self.top_p4(torch.cat((self.up(p5), p4), 1))
        o3 = self.out_p3(torch.cat((self.up(t4), p3), 1))
        o4 = self.out_p4(torch.cat((self.down_p3(o3), t4), 1))
        o5 = self.out_p5(torch.cat((self.down_p4(o4), p5), 1))
        return self.detect([o3, o4, o5])


def build_model(width: float = 0.25, depth: float = 0.33, nc: int = 80, seed: int = 0) -> YoloV8Shape:
    """A freshly initialised YOLOv8n-shaped model; the same ``seed`` gives the same weights."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return YoloV8Shape(width, depth, nc)


@dataclass(frozen=True)
class StepTimes:
    """Wall times of the timed steps (seconds, device synchronised) and the last loss."""

    seconds: list[float]
    loss: float

    @property
    def median(self) -> float:
        ordered = sorted(self.seconds)
        return ordered[len(ordered) // 2]


def make_step(
    model: nn.Module,
    *,
    batch_size: int,
    image_size: int = 640,
    device: str | torch.device = "cuda",
    amp_dtype: torch.dtype | None = None,
    optimizer: torch.optim.Optimizer | None = None,
    seed: int = 0,
) -> Callable[[], Tensor]:
    """A closure running one SGD step on a fixed batch of random images; returns the loss (no sync).

    ``amp_dtype`` (float16/bfloat16) turns on autocast, with a GradScaler for float16.
    """
    device = torch.device(device)
    model.to(device).train()
    if optimizer is None:
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.937, nesterov=True)
    scaler = _grad_scaler(device, enabled=amp_dtype == torch.float16)
    generator = torch.Generator(device="cpu").manual_seed(seed)
    images = torch.randn(batch_size, 3, image_size, image_size, generator=generator).to(device)
    opt = optimizer

    def step() -> Tensor:
        opt.zero_grad(set_to_none=True)
        with torch.autocast(device.type, dtype=amp_dtype or torch.float32, enabled=amp_dtype is not None):
            loss = sum(out.float().square().mean() for out in model(images))
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        return loss.detach()  # type: ignore[union-attr]

    return step


def train_steps(
    model: nn.Module,
    *,
    steps: int,
    batch_size: int,
    image_size: int = 640,
    device: str | torch.device = "cuda",
    amp_dtype: torch.dtype | None = None,
    warmup: int = 0,
    optimizer: torch.optim.Optimizer | None = None,
    seed: int = 0,
) -> StepTimes:
    """Run ``warmup + steps`` steps of ``make_step``; time each of the last ``steps`` (synchronised)."""
    device = torch.device(device)
    step = make_step(
        model,
        batch_size=batch_size,
        image_size=image_size,
        device=device,
        amp_dtype=amp_dtype,
        optimizer=optimizer,
        seed=seed,
    )
    seconds: list[float] = []
    loss = torch.zeros(())
    for index in range(warmup + steps):
        _sync(device)
        start = time.perf_counter()
        loss = step()
        _sync(device)
        if index >= warmup:
            seconds.append(time.perf_counter() - start)
    return StepTimes(seconds, float(loss))


def _grad_scaler(device: torch.device, enabled: bool) -> torch.amp.GradScaler:
    try:
        return torch.amp.GradScaler(device.type, enabled=enabled)
    except (AttributeError, TypeError):  # torch < 2.3
        return torch.cuda.amp.GradScaler(enabled=enabled)  # type: ignore[return-value]


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
