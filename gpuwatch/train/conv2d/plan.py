"""Every decision about one conv2d call signature, made once and cached: geometry, chunking, strategies.

The ``Choice`` of paths for a signature is made by tune.py and kept on its ``Plan``.

The fallback (function.py) is host-bound on small-channel CNNs, so what does not depend on the
tensors' values is planned here once per (shapes, dtype, arguments, tuning) and looked up after.
``Conv2dTuning`` holds the knobs benchmarks compare; nothing is read from the environment.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any, Literal

import torch

from gpuwatch.train.conv2d.geometry import ConvGeometry, IntOrPair, check_shapes, resolve_geometry


@dataclass(frozen=True)
class Conv2dTuning:
    """How the fallback computes its gradients; the defaults are the measured best, and
    benchmarks/conv2d_fallback.py compares others (``patch_conv2d(..., tuning=...)``).

    Weight gradient (``wgrad``): "gemm" gathers the input's columns as (K, N*L) and reduces over batch
    and pixels in one matrix product, "bmm" builds them with im2col and multiplies per sample (fewer
    launches, but a long reduction per sample), "auto" takes bmm up to ``wgrad_bmm_max_pixels`` output
    pixels per sample and gemm above, and for stride-1 layers up to that size the output gradient's
    columns that the input gradient builds. Input gradient (``dgrad``): "transpose" correlates
    grad_out with the flipped kernel where the stride is 1, "fold" never does; the rest is col2im, or
    one strided add per tap above ``col2im_max_pixels`` input pixels per sample. Transient columns
    are built in batch chunks of at most ``max_cols_bytes``.

    ``autotune`` (on GPUs): instead of those fixed strategies, measure every MIOpen-free path per call
    signature at its first use and keep the fastest (tune.py); off gives the deterministic
    choice above. ``cache_dir``: keep the measured choices there too (tune_store.py), so the next
    run in the same environment measures nothing. ``triton``: also try the Triton kernels
    (triton.py) where Triton runs; off by default, because compiling them makes the first step of
    a first run tens of seconds longer (H100: 33-45 s against 1-2 s; Triton caches them on disk).
    ``host``: where the host side of a layer runs (host.py): "auto" in compiled C++ where it
    builds (once per environment), else in Python; "compiled" requires the C++; "python" never
    builds it. The same kernels run either way.
    """

    wgrad: Literal["auto", "gemm", "bmm"] = "auto"
    wgrad_bmm_max_pixels: int = 32768
    dgrad: Literal["transpose", "fold"] = "transpose"
    col2im_max_pixels: int = 6400
    max_cols_bytes: int = 256 * 2**20
    autotune: bool = True
    cache_dir: str | None = None
    triton: bool = False
    host: Literal["auto", "compiled", "python"] = "auto"


DEFAULT_TUNING = Conv2dTuning()


Cols = tuple[tuple[int, int], tuple[int, int], tuple[int, int], tuple[int, int]]  # kernel, dilation, padding, stride


@dataclass(frozen=True, slots=True)
class Choice:
    """How one signature is computed.

    ``route``: "function" (gpuwatch's autograd Function with the named ``forward``, ``input_grad`` and
    ``weight_grad`` paths; a gradient that is not needed is ""; the same name of paths.BOTH_GRADS
    in both means one call computes both), "thnn" (PyTorch's slow_conv2d under its own autograd),
    "pointwise" (1x1 as a bmm under plain autograd) or "forward" (no gradient needed: the ``forward``
    path called directly).
    """

    route: str
    forward: str = ""
    input_grad: str = ""
    weight_grad: str = ""

    def describe(self) -> str:
        if self.route != "function":
            return self.route if self.route != "forward" else f"forward {self.forward}"
        grads = [f"{name} {path}" for name, path in (("input grad", self.input_grad), ("weight grad", self.weight_grad))
                 if path]
        return ", ".join([f"forward {self.forward}", *grads])


@dataclass(frozen=True, slots=True)
class Plan:
    """Every decision about one call signature that does not depend on the tensors' values."""

    geom: ConvGeometry
    extra: tuple[int, int]  # zeros added at the bottom/right ('same' with an even kernel)
    unbatched: bool
    pointwise: bool  # 1x1, stride 1, no padding: a bmm on views of the input
    in_size: tuple[int, int]  # after the extra zeros
    out_size: tuple[int, int]
    cols: Cols  # im2col arguments of the forward (and of the weight gradient)
    chunk: int  # samples per chunk of forward / weight-gradient / col2im columns
    wgrad_gemm: bool
    dgrad_cols: Cols | None  # stride 1: the input gradient correlates with the flipped kernel
    dgrad_chunk: int
    dgrad_taps: bool  # otherwise col2im sums the input-gradient columns
    shared_cols: bool  # stride 1, wgrad "auto": the output gradient's columns serve both gradients
    # (device, weight dtype, bias, needs input grad, needs weight grad, channels_last) -> Choice
    choices: dict[tuple[object, ...], Choice] = field(default_factory=dict, compare=False, hash=False)
    # the choices' key -> the compiled operator that computes it and its arguments after (x, weight, bias)
    # and before the autocast dtype (host.call_of), where it has a compiled form: one lookup per call
    host_calls: dict[tuple[object, ...], tuple[Any, tuple[Any, ...]]] = field(default_factory=dict, compare=False,
                                                                               hash=False)


@functools.lru_cache(maxsize=4096)
def plan_for(
    input_shape: tuple[int, ...],
    weight_shape: tuple[int, ...],
    dtype: torch.dtype,
    stride: IntOrPair,
    padding: str | IntOrPair,
    dilation: IntOrPair,
    groups: int,
    tuning: Conv2dTuning,
) -> Plan:
    if len(input_shape) not in (3, 4):
        raise RuntimeError(f"conv2d: expected a 3-D or 4-D input, got shape {tuple(input_shape)}")
    if len(weight_shape) != 4:
        raise RuntimeError(f"conv2d: expected a 4-D weight, got shape {tuple(weight_shape)}")
    wgrad, bmm_max_pixels, dgrad = tuning.wgrad, tuning.wgrad_bmm_max_pixels, tuning.dgrad
    col2im_max_pixels, max_cols_bytes = tuning.col2im_max_pixels, tuning.max_cols_bytes
    geom, extra = resolve_geometry(weight_shape, stride, padding, dilation, groups)
    shape = (1, *input_shape) if len(input_shape) == 3 else tuple(input_shape)
    shape = (*shape[:2], shape[2] + extra[0], shape[3] + extra[1])
    check_shapes(shape, weight_shape, geom)
    n, c, h, w = shape
    out_c, (kh, kw) = weight_shape[0], geom.kernel
    out_h, out_w = geom.out_size(h, w)
    item = torch.empty((), dtype=dtype).element_size()
    pad_t = (geom.dilation[0] * (kh - 1) - geom.padding[0], geom.dilation[1] * (kw - 1) - geom.padding[1])
    transposed = dgrad != "fold" and geom.stride == (1, 1) and min(pad_t) >= 0
    return Plan(
        geom=geom,
        extra=extra,
        unbatched=len(input_shape) == 3,
        pointwise=geom.pointwise and geom.stride == (1, 1),
        in_size=(h, w),
        out_size=(out_h, out_w),
        cols=(geom.kernel, geom.dilation, geom.padding, geom.stride),
        chunk=_chunk(n, c * kh * kw * out_h * out_w * item, max_cols_bytes),
        wgrad_gemm=wgrad == "gemm" or (wgrad == "auto" and out_h * out_w > bmm_max_pixels),
        dgrad_cols=(geom.kernel, geom.dilation, pad_t, (1, 1)) if transposed else None,
        dgrad_chunk=_chunk(n, out_c * kh * kw * h * w * item, max_cols_bytes),
        dgrad_taps=h * w > col2im_max_pixels,
        shared_cols=transposed and wgrad == "auto" and out_h * out_w <= bmm_max_pixels,
    )


def _chunk(n: int, per_sample_bytes: int, budget_bytes: int) -> int:
    """Samples per chunk so that one chunk's columns fit the transient budget (at least one)."""
    return max(1, min(n, budget_bytes // max(1, per_sample_bytes)))
