"""The one tolerant decoder of a status document into model's dataclasses: leftovers, receipts.

It builds on a document publish/decode.py has validated field by field (``decode.document``: wrong types are
refused there, in one line), so it only shapes: unknown keys are ignored (a newer daemon's additions), a missing
key takes its field's default (an older daemon's document), and JSON's lists and objects become the tuples and
pairs the dataclasses hold; a missing field without a default is None (what a reader must not do without,
decode.REQUIRED refuses). A value the dataclass cannot hold (an unknown mode) raises ``decode.Invalid`` naming
the field. Off `gpuwatch health`'s fast path, which reads the validated dict itself, and off `gpuwatch status`'s
(and `status --remote`'s), which renders the same document through publish/light_view.py without building the
dataclasses (issue 52; the renderers read both alike, tests/cli/test_light_view.py).
"""

from __future__ import annotations

import dataclasses
import types
import typing
from enum import Enum
from typing import Any, Literal, TypeVar, get_args, get_origin, get_type_hints

from gpuwatch.model import StatusView
from gpuwatch.publish.decode import Invalid

T = TypeVar("T")


def status_view(document: dict[str, Any]) -> StatusView:
    """A validated document (``decode.document``) as a StatusView; Invalid names what it cannot hold."""
    gpus = [{**gpu, "reset": _with_id(gpu.get("reset"), gpu), "unmanaged": _with_id(gpu.get("unmanaged"), gpu)}
            for gpu in document.get("gpus", [])]
    return build(StatusView, {**document, "gpus": gpus}, "the document")


def _with_id(part: dict[str, Any] | None, gpu: dict[str, Any]) -> dict[str, Any] | None:
    """A GPU's reset and unmanaged parts are published without the gpu_id their dataclasses carry."""
    return None if part is None else {**part, "gpu_id": gpu.get("gpu_id")}


def build(cls: type[T], raw: dict[str, Any], where: str) -> T:
    """``cls`` (a dataclass) from ``raw``: its fields by name, the rest ignored, a missing one its default."""
    hints = _hints(cls)
    values = {}
    for field in dataclasses.fields(cls):  # type: ignore[arg-type]
        if not field.init:
            continue
        if field.name in raw:
            values[field.name] = _value(raw[field.name], hints[field.name], f"{where}.{field.name}")
        elif field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING:
            values[field.name] = None  # decode.REQUIRED refused what a reader cannot do without
    return cls(**values)


_HINTS: dict[type, dict[str, Any]] = {}


def _hints(cls: type) -> dict[str, Any]:
    if cls not in _HINTS:
        _HINTS[cls] = get_type_hints(cls)
    return _HINTS[cls]


def _value(raw: Any, kind: Any, where: str) -> Any:
    origin, args = get_origin(kind), get_args(kind)
    if origin in (typing.Union, types.UnionType):
        if raw is None and type(None) in args:
            return None
        (kind,) = [arg for arg in args if arg is not type(None)]
        return _value(raw, kind, where)
    if origin is tuple:
        if isinstance(raw, dict):  # (name, value) pairs published as an object
            raw = list(raw.items())
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(_value(item, args[0], f"{where}[{i}]") for i, item in enumerate(raw))
        if len(raw) != len(args):
            raise Invalid(f"{where} is not {len(args)} values")
        return tuple(_value(item, arg, f"{where}[{i}]") for i, (item, arg) in enumerate(zip(raw, args, strict=True)))
    if origin is dict:
        return {key: _value(item, args[1], f"{where}.{key}") for key, item in raw.items()}
    if origin is Literal:
        if raw not in args:
            raise Invalid(f"{where} is {raw!r}, not one of {', '.join(map(str, args))}")
        return raw
    if isinstance(kind, type) and issubclass(kind, Enum):
        try:
            return kind(raw)
        except ValueError:
            raise Invalid(f"{where} is {raw!r}, not one of {', '.join(str(m.value) for m in kind)}") from None
    if dataclasses.is_dataclass(kind):
        return build(kind, raw, where)  # type: ignore[arg-type]
    return raw  # int, float, str, bool: decode.document checked it
