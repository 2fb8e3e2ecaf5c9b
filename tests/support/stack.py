"""The monitoring stack for end-to-end tests: gpuwatch daemons, Prometheus and Alertmanager, for real.

Each ``start_*`` starts one server through a ``Processes`` (stopped by it), on 127.0.0.1 and a free
port, and returns once it answers. Binaries are Debian's (scripts/install-system-deps.sh); tests skip
with ``missing(...)``'s reason when one is absent.
"""

from __future__ import annotations

import json
import re
import shutil
import sys
import urllib.error
import urllib.parse
from pathlib import Path
from typing import Any

from tests.support.paths import REPO
from tests.support.processes import Processes, Started, free_port, get_json, wait_up

PROMETHEUS = shutil.which("prometheus")
PROMTOOL = shutil.which("promtool")
# Debian names it prometheus-alertmanager, upstream alertmanager.
ALERTMANAGER = shutil.which("prometheus-alertmanager") or shutil.which("alertmanager")
AMTOOL = shutil.which("amtool")
GPUWATCH = [sys.executable, "-c", "import sys; from gpuwatch.cli import main; sys.exit(main())"]
_LISTENING = re.compile(r"HTTP listening on 127\.0\.0\.1:(\d+)")
PROMETHEUS_CONFIG = REPO / "config" / "prometheus.yml"


def missing(*tools: str) -> str:
    """The skip reason when one of the named tools is absent, else ''."""
    found = {"prometheus": PROMETHEUS, "promtool": PROMTOOL, "alertmanager": ALERTMANAGER, "amtool": AMTOOL}
    packages = {"prometheus": "prometheus", "promtool": "prometheus", "alertmanager": "prometheus-alertmanager",
                "amtool": "prometheus-alertmanager"}
    gone = [tool for tool in tools if found[tool] is None]
    if not gone:
        return ""
    return (f"{', '.join(gone)} missing: apt-get install {' '.join(sorted({packages[t] for t in gone}))} "
            "(scripts/install-system-deps.sh does it for make test / CI)")


def daemon_config(runtime_dir: Path, body: str = "", interval_s: float = 0.5) -> str:
    """A gpuwatch.toml for a test daemon: its own runtime dir, HTTP on 127.0.0.1 and a kernel-picked port."""
    return (f'runtime_dir = "{runtime_dir}"\ninterval_s = {interval_s}\n'
            '[http]\nlisten = "127.0.0.1"\nport = 0\n' + body)


def start_gpuwatch(processes: Processes, name: str, config: Path) -> tuple[Started, str]:
    """`gpuwatch run -c CONFIG`; returns the child and its address ``127.0.0.1:PORT`` once it listens."""
    child = processes.start(name, [*GPUWATCH, "run", "-c", str(config)])
    port = wait_up(f"{name} to listen", lambda: (m := _LISTENING.search(child.log.read_text())) and m.group(1), child)
    return child, f"127.0.0.1:{port}"


def start_prometheus(processes: Processes, workdir: Path, config: str, name: str = "prometheus") -> tuple[Started, str]:
    """Prometheus on ``config`` (YAML text, written to ``workdir/prometheus.yml``; relative paths in it are
    read from ``workdir``); returns the child and its base URL once it answers."""
    assert PROMETHEUS is not None
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "prometheus.yml").write_text(config)
    port = free_port()
    child = processes.start(name, [PROMETHEUS, f"--config.file={workdir / 'prometheus.yml'}",
                                   f"--storage.tsdb.path={workdir / 'tsdb'}", f"--web.listen-address=127.0.0.1:{port}",
                                   f"--web.external-url=http://127.0.0.1:{port}"], cwd=workdir)
    base = f"http://127.0.0.1:{port}"
    wait_up("prometheus to be ready", lambda: get_json(f"{base}/api/v1/status/buildinfo"), child)
    return child, base


def start_alertmanager(processes: Processes, workdir: Path, config: Path) -> tuple[Started, str]:
    """Alertmanager on ``config`` with its data in ``workdir``; returns the child and base URL once ready.

    ``--cluster.listen-address=`` (empty) always: the default gossips on *:9094, a fixed port on every
    interface (parallel runs collide) and holds notifications until the gossip settles.
    """
    assert ALERTMANAGER is not None
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    child = processes.start("alertmanager", [ALERTMANAGER, f"--config.file={config}",
                                             f"--storage.path={workdir / 'am-data'}",
                                             f"--web.listen-address=127.0.0.1:{port}", f"--web.external-url={base}",
                                             "--cluster.listen-address="], cwd=workdir)
    wait_up("alertmanager to be ready", lambda: get_json(f"{base}/api/v2/status"), child)
    return child, base


def query(base: str, expr: str) -> list[dict[str, Any]]:
    """An instant query; a rejected expression fails with Prometheus' reason."""
    url = f"{base}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    try:
        body = get_json(url)
    except urllib.error.HTTPError as exc:
        body = json.loads(exc.read())
    assert body["status"] == "success", f"{expr}: {body.get('errorType')}: {body.get('error')}"
    result: list[dict[str, Any]] = body["data"]["result"]
    return result


def targets_up(base: str, job: str = "gpuwatch") -> set[str]:
    """The instances of ``job`` that Prometheus scraped successfully."""
    targets = get_json(f"{base}/api/v1/targets")["data"]["activeTargets"]
    return {t["labels"]["instance"] for t in targets if t["labels"].get("job") == job and t["health"] == "up"}


def shorten_for(rules: str, for_: str, alerts: set[str], keep_firing_for: str | None = None) -> str:
    """alerts.yml text with the `for:` of ``alerts`` set to ``for_`` (and their `keep_firing_for:` to
    ``keep_firing_for`` when given); every other byte unchanged.

    Only the alerts a test provokes: shortening all would turn "paused for 15 minutes"
    (TrainerPausedTooLong) into "paused for 2 s" for a test that pauses a trainer. The shipped
    durations are pinned by the promtool unit tests.
    """
    out, alert, changed, kept = [], None, set(), set()
    for line in rules.splitlines(keepends=True):
        if m := re.match(r"^\s+- alert: (\w+)", line):
            alert = m.group(1)
        if (m := re.match(r"^(\s+)for: \S+$", line)) and alert in alerts:
            line = f"{m.group(1)}for: {for_}\n"
            changed.add(alert)
        if keep_firing_for and (m := re.match(r"^(\s+)keep_firing_for: \S+$", line)) and alert in alerts:
            line = f"{m.group(1)}keep_firing_for: {keep_firing_for}\n"
            kept.add(alert)
        out.append(line)
    assert changed == alerts, f"no `for:` found for {alerts - changed}"
    assert not keep_firing_for or kept == alerts, f"no `keep_firing_for:` found for {alerts - kept}"
    return "".join(out)


_DURATION = re.compile(r"(\d+)(ms|s|m|h|d)")
_UNIT_S = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def duration_s(text: str) -> float:
    """A Prometheus duration (``1m30s``) in seconds."""
    parts = _DURATION.findall(text)
    assert parts and "".join(n + u for n, u in parts) == text, f"not a duration: {text!r}"
    return sum(int(n) * _UNIT_S[u] for n, u in parts)


def scaled(text: str, factor: float) -> str:
    """A duration (``2m``) times ``factor``, in milliseconds (``12000ms``), as Prometheus and Alertmanager read it."""
    return f"{round(duration_s(text) * factor * 1000)}ms"


def scale_rule_timers(rules: str, factor: float) -> str:
    """alerts.yml text with every `for:` and `keep_firing_for:` multiplied by ``factor``; every other byte
    unchanged. A test copy with the shipped structure and proportions, so it cannot drift from the file
    (expression windows such as [2m] stay: they are about the data, not the timing of alerts)."""
    def scale(m: re.Match[str]) -> str:
        return f"{m.group(1)}{scaled(m.group(2), factor)}"
    out, count = re.subn(r"(?m)^(\s+(?:for|keep_firing_for): )(\S+)$", scale, rules)
    assert count, "no `for:` or `keep_firing_for:` in the rules"
    return out


def shipped_relabeling() -> str:
    """The gpuwatch job's ``relabel_configs`` of config/prometheus.yml, verbatim (it sets ``host``)."""
    lines = PROMETHEUS_CONFIG.read_text().splitlines(keepends=True)
    start = lines.index("    relabel_configs:\n")
    end = next((i for i in range(start + 1, len(lines))
                if lines[i].strip() and len(lines[i]) - len(lines[i].lstrip()) <= 4), len(lines))
    return "".join(lines[start:end])


def local_alertmanager(text: str, http_port: int, smtp_port: int, group_wait: str = "1s",
                       group_interval: str = "1s") -> str:
    """The shipped config pointed at the test's sink, with short group timings (1 s unless given); each
    rewrite must hit."""
    subs = [
        (r"(?m)^(\s+- url: )http://alert-sink\.example\.org\S*", rf"\g<1>http://127.0.0.1:{http_port}/webhook"),
        (r"(?m)^(\s+- url: )'https://ntfy\.example\.org/gpu-alerts\?", rf"\g<1>'http://127.0.0.1:{http_port}/ntfy?"),
        (r"(?m)^(\s+- api_url: )https://chat\.example\.org\S*", rf"\g<1>http://127.0.0.1:{http_port}/chat"),
        (r"(?m)^(\s+smtp_smarthost: )\S+", rf"\g<1>127.0.0.1:{smtp_port}"),
        (r"(?m)^(\s+smtp_require_tls: )true", r"\g<1>false"),  # the sink offers no STARTTLS
        (r"(?m)^\s+smtp_auth_\w+: .*\n", ""),  # and no AUTH
        (r"(?m)^(\s+group_wait: )\S+", rf"\g<1>{group_wait}"),
        (r"(?m)^(\s+group_interval: )\S+", rf"\g<1>{group_interval}"),
        (r"(?m)^(\s+repeat_interval: )\S+", r"\g<1>1h"),
    ]
    for pattern, replacement in subs:
        text, count = re.subn(pattern, replacement, text)
        assert count, f"the shipped alertmanager.yml no longer has {pattern!r}"
    assert not re.search(r"(?m)^[^#]*https?://[^'\s]*example\.org", text), "a receiver still points outside"
    return text
