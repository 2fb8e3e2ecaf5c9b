"""`gpuwatch health`'s answer in each format (pure): a status document (or none) and ``now`` -> exit code and text.

The formats and their contracts (docs/cluster.md):

* ``nhc``: 0 healthy, 1 not; one line (LBNL NHC, Slurm's HealthCheckProgram).
* ``npd``: node-problem-detector's custom plugin: 0 ok, 1 problem, 2 unknown (no fresh verdict from a daemon:
  stale or down, and no GPU fault found otherwise); the message one line of at most 80 characters.
* ``nagios``: 0 OK, 1 WARNING (healthy, but a cap governs or a trainer is paused: normal operation worth a
  look), 2 CRITICAL (a fault), 3 UNKNOWN (as npd's 2); ``GPUWATCH OK - ...`` then one fault per line.
* ``json``: the verdict as an object; the exit code is nhc's.

Imports nothing but the verdict's vocabulary (json for ``--format json`` alone): this runs on every health check of
every node, a new process each time (docs/cluster.md, benchmarks/health_latency.py; tests/cluster/
test_health_imports.py pins it).
"""

from __future__ import annotations

from gpuwatch.publish import decode
from gpuwatch.publish.health_codes import (
    CLASSES,
    DAEMON_CODES,
    FUTURE,
    MAX_MESSAGE_CHARS,
    NO_DAEMON,
    STALE,
    UNUSABLE,
    code_of,
    fault_line,
)
from gpuwatch.publish.state import from_future, is_stale, state_age

# typing's import (a NamedTuple, Literal) was a tenth of the check's own time: the names below are for mypy only.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Literal

    Format = Literal["nhc", "npd", "nagios", "json"]
    Status = Literal["healthy", "unhealthy", "unknown"]

FORMATS: tuple[Format, ...] = ("nhc", "npd", "nagios", "json")


class Answer:
    """What the check found: the fault lines (``gpuwatch:G006 ...``), the notes, where the verdict came from (a
    plain class: a NamedTuple imports typing, a dataclass dataclasses and inspect, each a tenth of the check)."""

    __slots__ = ("lines", "notes", "source", "age_s", "drain_after_checks", "resume_after_checks")

    def __init__(self, lines: tuple[str, ...], notes: tuple[str, ...] = (), source: str = "daemon",
                 age_s: float | None = None, drain_after_checks: int = 2, resume_after_checks: int = 2) -> None:
        self.lines = lines
        self.notes = notes
        self.source = source  # "daemon": its published verdict; "sysfs": judged here from a direct read
        self.age_s = age_s
        self.drain_after_checks = drain_after_checks
        self.resume_after_checks = resume_after_checks

    def __repr__(self) -> str:
        return f"Answer(lines={self.lines!r}, notes={self.notes!r}, source={self.source!r}, age_s={self.age_s!r})"

    @property
    def healthy(self) -> bool:
        return not self.lines

    @property
    def status(self) -> Status:
        """unknown: the only faults are about the daemon (no fresh verdict), nothing about a GPU."""
        if not self.lines:
            return "healthy"
        codes = {code_of(line) for line in self.lines}
        return "unknown" if codes <= set(DAEMON_CODES) else "unhealthy"


def from_document(raw: object, now_unix: float, boot: str | None = None, now_boottime_s: float = 0.0) -> Answer:
    """The daemon's published verdict from ``raw`` (its parsed state file); G014 when the document cannot be used
    (publish/decode.py), G015 when it is stamped in the future, G001 when it is stale or has no verdict (an older
    daemon). Its age by CLOCK_BOOTTIME on the same boot (``boot``, ``now_boottime_s``: state.this_boot)."""
    try:
        document = decode.document(raw)
    except decode.Invalid as exc:
        return Answer(lines=(fault_line(UNUSABLE, None, f"daemon state unusable: {exc}"),))
    age_s = state_age(document, now_unix, boot, now_boottime_s)
    if from_future(age_s):
        return Answer(lines=(fault_line(FUTURE, None, f"daemon state stamped {-age_s:.0f}s in the future"),),
                      age_s=age_s)
    daemon = document.get("daemon") or {}
    health = document.get("health")
    if is_stale(age_s, daemon.get("interval_s", 1.0)) or health is None:
        why = f"daemon state {age_s:.0f}s old" if health is not None else "daemon publishes no verdict"
        return Answer(lines=(fault_line(STALE, None, why),), age_s=age_s)
    return Answer(lines=tuple(f["line"] for f in health["faults"]), notes=tuple(health.get("notes", ())),
                  age_s=age_s, drain_after_checks=health.get("drain_after_checks", 2),
                  resume_after_checks=health.get("resume_after_checks", 2))


def no_daemon(lines: tuple[str, ...], notes: tuple[str, ...], daemon_down: bool, drain_after_checks: int,
              resume_after_checks: int) -> Answer:
    """A direct read's verdict (no daemon runs): its faults, and G002 first unless ``[health] daemon_down`` is off."""
    first = (fault_line(NO_DAEMON, None, "daemon not running"),) if daemon_down else ()
    return Answer(lines=first + lines, notes=notes, source="sysfs", drain_after_checks=drain_after_checks,
                  resume_after_checks=resume_after_checks)


def only(answer: Answer, fault_class: str | None) -> Answer:
    """The answer for one fault class (``CLASSES``): its faults and the daemon's; the notes dropped."""
    if fault_class is None:
        return answer
    keep = set(CLASSES[fault_class]) | set(DAEMON_CODES)
    return Answer(lines=tuple(line for line in answer.lines if code_of(line) in keep), source=answer.source,
                  age_s=answer.age_s, drain_after_checks=answer.drain_after_checks,
                  resume_after_checks=answer.resume_after_checks)


def summary(answer: Answer, limit: int = MAX_MESSAGE_CHARS) -> str:
    """One line of at most ``limit`` characters: the first fault (+ how many more), else healthy (and why not quiet)."""
    if answer.lines:
        more = f" (+{len(answer.lines) - 1} more)" if len(answer.lines) > 1 else ""
        return _cut(answer.lines[0], limit - len(more)) + more
    text = "gpuwatch: healthy" + (f" ({'; '.join(answer.notes)})" if answer.notes else "")
    return _cut(text, limit)


def render(answer: Answer, fmt: Format) -> tuple[int, str]:
    """(exit code, text to print) in ``fmt``."""
    status = answer.status
    if fmt == "npd":
        return {"healthy": 0, "unhealthy": 1, "unknown": 2}[status], summary(answer)
    if fmt == "nagios":
        if status == "healthy":
            code, word = (1, "WARNING") if answer.notes else (0, "OK")
        else:
            code, word = (2, "CRITICAL") if status == "unhealthy" else (3, "UNKNOWN")
        rest = [*answer.lines[1:], *answer.notes] if answer.lines else []
        return code, "\n".join([f"GPUWATCH {word} - {summary(answer, 200)}", *rest])
    if fmt == "json":
        import json  # here: the other formats need no json module (the state file: publish.state.parse)

        doc = {"status": status, "healthy": answer.healthy, "faults": list(answer.lines), "notes": list(answer.notes),
               "source": answer.source, "age_s": answer.age_s}
        return (0 if answer.healthy else 1), json.dumps(doc)
    return (0 if answer.healthy else 1), summary(answer)


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: max(0, limit - 3)] + "..."
