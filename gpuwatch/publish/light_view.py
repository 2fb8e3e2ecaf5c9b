"""A validated status document read by attribute, as model's dataclasses read, without building them (issue 52).

`gpuwatch status` (locally and `--remote`) renders a daemon's document through this view: publish/view.py's
dataclasses cost more than the rest of the command (importing model.py compiles some 35 dataclasses, with
dataclasses, typing and enum under it), and the renderers read a few dozen fields. A ``Part`` wraps one object of
the document, ``decode.document`` having checked every field's type; an attribute is the field as publish/view.py
would give it:

* a missing key is its default (``decode.DEFAULTS``, model's own), else None;
* an object is a ``Part`` of its spec (``decode.SPECS``), a list a tuple; an object of objects (a GPU's
  ``temperatures``) a dict of parts, an object of scalars (``sources``, ``throttled_s``) the (name, value) pairs
  model holds; a state (a mode, a phase) the plain string its enum's value is (model's enums are ``str`` ones);
* what model derives (a GPU's ``suspended``, ``pwm_ratio``, ``fan_duty``) is gpuwatch/derived.py's, as model's is;
* a name the document's spec has not is an AttributeError: a GPU's ``reset`` and ``unmanaged`` are published
  without the ``gpu_id`` publish/view.py copies into them from their GPU (read the GPU's).

A state that is not one of ``decode.CHOICES`` is refused when the view is made, in the line publish/view.py says
it in. The renderers are typed against model's dataclasses (under TYPE_CHECKING: mypy checks their field names);
tests/cli/test_light_view.py renders every document the tests have through both and compares the text.
"""

from __future__ import annotations

from gpuwatch import derived
from gpuwatch.publish.decode import CHOICES, DEFAULTS, SPECS, Invalid

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from gpuwatch.model import StatusView


def light_view(document: dict[str, Any]) -> StatusView:
    """A validated document (``decode.document``) read as a StatusView; Invalid names a state it cannot hold."""
    _check_choices(document, "StatusDocument", "the document")
    return Part(document, "StatusDocument")  # type: ignore[return-value]


class Part:
    """One object of the document by attribute: its fields as the dataclass of its spec holds them."""

    __slots__ = ("_raw", "_spec")

    def __init__(self, raw: dict[str, Any], spec: str) -> None:
        self._raw, self._spec = raw, spec

    def __getattr__(self, name: str) -> Any:
        kind = SPECS[self._spec].get(name)
        if kind is None:
            raise AttributeError(f"{self._spec} has no field {name!r}")
        raw = self._raw.get(name, _MISSING)
        return _value(DEFAULTS.get(self._spec, _NONE).get(name) if raw is _MISSING else raw, kind,
                      f"{self._spec}.{name}")

    def __repr__(self) -> str:
        return f"Part({self._spec}, {self._raw!r})"


class GpuPart(Part):
    """A GPU, with what model's GpuReading derives from its fields (never the published copies: an older daemon's
    document may lack them)."""

    __slots__ = ()

    @property
    def suspended(self) -> bool:
        return derived.suspended(self.runtime_status)

    @property
    def pwm_ratio(self) -> float | None:
        return derived.sampled_pwm_ratio(self.pwm, self.pwm_min, self.pwm_max)

    @property
    def fan_duty(self) -> float | None:
        return derived.fan_duty(self.pwm_ratio, self.fan_duty_ratio)


_MISSING = object()
_NONE: dict[str, Any] = {}
_PARTS: dict[str, type[Part]] = {"GpuDoc": GpuPart}


def _part(raw: dict[str, Any], spec: str) -> Part:
    return _PARTS.get(spec, Part)(raw, spec)


def _value(raw: Any, kind: Any, where: str) -> Any:
    """``raw`` (of the SPECS form ``kind``) as the dataclass field holds it; a pair of the wrong length is Invalid, as
    publish/view.py refuses it (when read: the renderers read none of them)."""
    if raw is None:
        return None
    if isinstance(kind, tuple):  # ("?", list or object)
        kind = kind[1]
    if isinstance(kind, list):
        item = kind[0]
        if isinstance(item, list):  # pairs published as lists (restarts_by_reason, gaps: model's tuple[tuple[a, b]])
            for i, pair in enumerate(raw):
                if len(pair) != 2:
                    raise Invalid(f"{where}[{i}] is not 2 values")
            return tuple(tuple(pair) for pair in raw)
        if item in SPECS:
            return tuple(_part(part, item) for part in raw)
        return tuple(raw)
    if isinstance(kind, dict):
        item = kind["*"]
        if item in SPECS:  # by name, as model holds it (a GPU's temperatures)
            return {name: _part(part, item) for name, part in raw.items()}
        return tuple(raw.items())  # (name, value) pairs published as an object
    kind = kind.rstrip("?")
    return _part(raw, kind) if kind in SPECS else raw


def _check_choices(raw: dict[str, Any], spec: str, where: str) -> None:
    """Every state of ``raw`` and of its parts one of its CHOICES, else Invalid as publish/view.py says it."""
    for name, allowed in CHOICES.get(spec, {}).items():
        value = raw.get(name)
        if value is not None and value not in allowed:
            raise Invalid(f"{where}.{name} is {value!r}, not one of {', '.join(allowed)}")
    for name, item, shape in _HOLDING[spec]:
        value = raw.get(name)
        if value is None:
            continue
        if shape == "list":
            for i, part in enumerate(value):
                _check_choices(part, item, f"{where}.{name}[{i}]")
        elif shape == "map":
            for key, part in value.items():
                _check_choices(part, item, f"{where}.{name}.{key}")
        else:
            _check_choices(value, item, f"{where}.{name}")


def _holding() -> dict[str, list[tuple[str, str, str]]]:
    """Per spec, its fields whose objects hold a state to check: (name, their spec, "one", "list" or "map")."""
    def nested(kind: Any) -> tuple[str, str] | None:
        if isinstance(kind, tuple):
            kind = kind[1]
        if isinstance(kind, list) and isinstance(kind[0], str) and kind[0] in SPECS:
            return kind[0], "list"
        if isinstance(kind, dict) and kind["*"] in SPECS:
            return kind["*"], "map"
        if isinstance(kind, str) and kind.rstrip("?") in SPECS:
            return kind.rstrip("?"), "one"
        return None  # a scalar, or a list of them

    def holds(spec: str) -> bool:
        return spec in CHOICES or any(found is not None and holds(found[0])
                                      for found in map(nested, SPECS[spec].values()))

    return {spec: [(name, *found) for name, kind in fields.items()
                   if (found := nested(kind)) is not None and holds(found[0])]
            for spec, fields in SPECS.items()}


_HOLDING = _holding()
