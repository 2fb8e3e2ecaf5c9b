"""Argument handling for the fallback convolution: F.conv2d's stride/padding/dilation forms and autocast.

Everything here mirrors what ``torch.nn.functional.conv2d`` accepts (ints, pairs, ``'same'``,
``'valid'``) and how autocast treats a convolution, so that ``gpuwatch.train.conv2d.function`` can be a drop-in
replacement. The result is a small frozen ``ConvGeometry`` that the autograd Function carries.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import overload

import torch

IntOrPair = int | Sequence[int]


@dataclass(frozen=True)
class ConvGeometry:
    """The shape of one 2-D convolution, every field a (height, width) pair except ``groups``."""

    kernel: tuple[int, int]
    stride: tuple[int, int]
    padding: tuple[int, int]
    dilation: tuple[int, int]
    groups: int

    @property
    def pointwise(self) -> bool:
        """A 1x1 kernel without padding: the columns are (a strided view of) the input itself."""
        return self.kernel == (1, 1) and self.padding == (0, 0)

    def out_size(self, height: int, width: int) -> tuple[int, int]:
        return (
            _out_len(height, self.kernel[0], self.stride[0], self.padding[0], self.dilation[0]),
            _out_len(width, self.kernel[1], self.stride[1], self.padding[1], self.dilation[1]),
        )


def pair(value: IntOrPair, name: str) -> tuple[int, int]:
    if isinstance(value, int):
        return (value, value)
    items = tuple(int(v) for v in value)
    if len(items) == 1:
        return (items[0], items[0])
    if len(items) != 2:
        raise ValueError(f"conv2d: {name} must be an int or a pair, got {value!r}")
    return (items[0], items[1])


def resolve_geometry(
    weight_shape: Sequence[int],
    stride: IntOrPair,
    padding: str | IntOrPair,
    dilation: IntOrPair,
    groups: int,
) -> tuple[ConvGeometry, tuple[int, int]]:
    """The symmetric geometry plus the extra (height, width) zeros to add at the bottom/right.

    ``padding='same'`` with an even effective kernel needs one more row/column on one side; like
    PyTorch we put it at the end and let the caller pad the input with it.
    """
    kernel = (int(weight_shape[2]), int(weight_shape[3]))
    stride_p, dilation_p = pair(stride, "stride"), pair(dilation, "dilation")
    extra = (0, 0)
    if isinstance(padding, str):
        if padding == "valid":
            padding_p = (0, 0)
        elif padding == "same":
            if stride_p != (1, 1):
                raise ValueError("padding='same' is not supported for strided convolutions")
            totals = [d * (k - 1) for d, k in zip(dilation_p, kernel, strict=True)]
            padding_p = (totals[0] // 2, totals[1] // 2)
            extra = (totals[0] - 2 * padding_p[0], totals[1] - 2 * padding_p[1])
        else:
            raise ValueError(f"Invalid padding string {padding!r}, should be one of ('valid', 'same')")
    else:
        padding_p = pair(padding, "padding")
    if min(stride_p) < 1 or min(dilation_p) < 1 or min(padding_p) < 0 or groups < 1:
        raise RuntimeError(
            f"conv2d: bad geometry stride={stride_p} padding={padding_p} "
            f"dilation={dilation_p} groups={groups}"
        )
    return ConvGeometry(kernel, stride_p, padding_p, dilation_p, int(groups)), extra


def check_shapes(input_shape: Sequence[int], weight_shape: Sequence[int], geom: ConvGeometry) -> None:
    """Raise like F.conv2d does for channel/group mismatches and kernels larger than the input."""
    if len(weight_shape) != 4:
        raise RuntimeError(f"conv2d: expected a 4-D weight, got shape {tuple(weight_shape)}")
    channels, out_channels, per_group = input_shape[1], weight_shape[0], weight_shape[1]
    if out_channels % geom.groups != 0 or per_group * geom.groups != channels:
        raise RuntimeError(
            f"conv2d: input of {channels} channels does not match weight {tuple(weight_shape)} "
            f"with groups={geom.groups}"
        )
    out_h, out_w = geom.out_size(input_shape[2], input_shape[3])
    if out_h < 1 or out_w < 1:
        raise RuntimeError(
            f"conv2d: kernel {geom.kernel} (dilation {geom.dilation}) is larger than the padded "
            f"input {tuple(input_shape[2:])} (padding {geom.padding})"
        )


def autocast_dtype(device_type: str) -> torch.dtype | None:
    """The lower-precision dtype autocast would give a convolution on ``device_type``, or None."""
    try:
        if not torch.is_autocast_enabled(device_type):
            return None
        return torch.get_autocast_dtype(device_type)
    except RuntimeError:  # a device kind autocast does not know ("meta"): never autocast
        return None
    except TypeError:  # torch < 2.4 has only the per-device-kind functions
        if device_type == "cuda" and torch.is_autocast_enabled():
            return torch.get_autocast_gpu_dtype()
        if device_type == "cpu" and torch.is_autocast_cpu_enabled():
            return torch.get_autocast_cpu_dtype()
        return None


@overload
def autocast_cast(tensor: torch.Tensor, dtype: torch.dtype) -> torch.Tensor: ...
@overload
def autocast_cast(tensor: None, dtype: torch.dtype) -> None: ...
def autocast_cast(tensor: torch.Tensor | None, dtype: torch.dtype) -> torch.Tensor | None:
    """Cast like autocast does for a lower-precision op: floating tensors except float64."""
    if tensor is None or tensor.dtype == dtype or not tensor.is_floating_point() or tensor.dtype == torch.float64:
        return tensor
    return tensor.to(dtype)


def _out_len(size: int, kernel: int, stride: int, padding: int, dilation: int) -> int:
    return (size + 2 * padding - dilation * (kernel - 1) - 1) // stride + 1
