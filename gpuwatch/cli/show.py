"""`gpuwatch status` and `sensors`: where the document comes from, and printing it once or every S seconds.

``status`` shows the running daemon's published state, or reads the GPUs itself when no daemon runs
(and says so); ``sensors`` always reads them itself (and says whether a daemon runs). Both read the
GPUs the config means: the simulated tree when it simulates (``Config.with_effective_sysfs``), the
same rule the daemon follows. ``--json`` prints the schema-1 document, indented once, or one compact
document per line with ``--watch`` (JSON Lines, for pipes).
"""

from __future__ import annotations

import os
import sys
import time

from gpuwatch.cli.fit import terminal_width
from gpuwatch.cli.status import render_view, select_gpus, shown_view, view_exit_code
from gpuwatch.publish.state import from_future, is_stale, read_state, state_age, this_boot

# A running daemon's view needs neither the config's models nor the GPUs' modules: they are imported where a
# direct reading is made (issue 52: `gpuwatch status` within 2x of Python's own start, cli/status_quick.py).
TYPE_CHECKING = False
if TYPE_CHECKING:
    import argparse
    from collections.abc import Callable
    from pathlib import Path
    from typing import TypeAlias

    from gpuwatch.config.file import Config
    from gpuwatch.gpus.sampler import Sampler
    from gpuwatch.publish.document import StatusDocument

Fetch: TypeAlias = "Callable[[], tuple[StatusDocument, str | None]]"  # the document and a note for the text view

NOT_RUNNING = "gpuwatch daemon is not running: values read directly"
ASK_TIMEOUT_S = 2.0  # asking a running daemon whose state file is stale or missing
FULL_BELOW_BYTES = 64 * 1024  # less free than a state file needs (a 16-GPU document is ~40 KiB)


def status_fetch(config: Config, processes: bool = False) -> Fetch:
    """The daemon's view when it runs, else a direct reading with a note saying so (and naming the trainers
    a dead daemon left running, stopped or held: supervise/leftovers.py)."""
    reader = DirectReader(config)

    def fetch() -> tuple[StatusDocument, str | None]:
        found = daemon_document(config)
        if found is not None:
            return found
        from gpuwatch.daemon.lock import holder

        pid = holder(config.resolved_runtime_dir)
        if pid is not None:  # alive (its lock), so nothing it left is a leftover
            unusable = read_state(config.state_file)[1]
            why = f" ({config.state_file} cannot be used: {unusable})" if unusable else ""
            note = (f"gpuwatch daemon (pid {pid}) runs, but neither its state file nor HTTP nor its control socket "
                    f"answered{why}{_dir_problem(config)}: values read directly")
            return reader.document(processes), _direct_note(config, note)
        from gpuwatch.supervise.leftovers import describe_all

        return reader.document(processes), "\n".join(
            [_direct_note(config, NOT_RUNNING), *describe_all(config.resolved_runtime_dir, time.time())])

    return fetch


def sensors_fetch(config: Config, processes: bool = False) -> Fetch:
    """Always a direct reading; the note says whether a daemon runs beside it."""
    reader = DirectReader(config)

    def fetch() -> tuple[StatusDocument, str | None]:
        running = daemon_document(config)
        daemon = running[0].get("daemon") if running else None
        beside = (f"gpuwatch daemon running (pid {daemon['pid']}); these values are read directly, "
                  "`gpuwatch status` shows the daemon's view") if daemon else "gpuwatch daemon is not running"
        return reader.document(processes), _direct_note(config, beside)

    return fetch


def fresh_document(state_file: str | Path) -> StatusDocument | None:
    """The running daemon's published document when it is fresh (its pid lives, its stamp is recent): `status`'s
    answer while a daemon runs, which needs nothing of the config but where the file is (cli/status_quick.py)."""
    doc = read_state(state_file)[0]
    daemon = doc.get("daemon") if doc else None
    pid = daemon.get("pid") if daemon else None
    return doc if doc and daemon and isinstance(pid, int) and _alive(pid) and not _stale(doc) else None


def daemon_document(config: Config) -> tuple[StatusDocument, str | None] | None:
    """The daemon's published state if it is running, else None; a stuck daemon gets a failure added.

    When the state file is stale or missing while the daemon lives (its pid, or the runtime directory's
    lock), the daemon is asked over HTTP, then over its control socket: a full or read-only runtime
    directory stops the file, not the daemon (issue 31). The note says what is wrong with the file."""
    from gpuwatch.daemon.lock import holder

    doc, unusable = read_state(config.state_file)
    daemon = doc.get("daemon") if doc else None
    pid = daemon.get("pid") if daemon else None
    if doc and daemon and isinstance(pid, int) and _alive(pid):
        age = state_age(doc, time.time(), *this_boot())
        if not _stale(doc):
            return doc, None
        problem = f"its state file {config.state_file} is {age:.0f} s old"
    else:
        pid = holder(config.resolved_runtime_dir)
        if pid is None:
            if unusable:  # no daemon holds the directory: the file is said once, the values read directly
                import logging

                logging.getLogger("gpuwatch.state").warning("cannot use state file %s: %s", config.state_file,
                                                            unusable)
            return None
        doc, problem = None, (f"its state file {config.state_file} cannot be used: {unusable}" if unusable
                              else f"it has no state file {config.state_file}")
    live = _ask_daemon(config, pid)
    if live is not None and not _stale(live[0]):  # a stuck loop publishes nothing new anywhere
        document, way = live
        return document, f"{problem}{_dir_problem(config)}; shown: the daemon's own view, over {way}"
    if doc is None or daemon is None:
        return None
    daemon.setdefault("failures", []).append(
        f"state stamped {-age:.0f}s in the future: its freshness cannot be told" if from_future(age)
        else f"state is {age:.0f}s old: the control loop is stuck")
    return doc, None


def _stale(doc: StatusDocument) -> bool:
    """Stale, or stamped in the future: by CLOCK_BOOTTIME on the same boot, else by the wall clocks (state_age)."""
    daemon = doc.get("daemon")
    age = state_age(doc, time.time(), *this_boot())
    return from_future(age) or is_stale(age, float(daemon.get("interval_s") or 1) if daemon else 1.0)


def _ask_daemon(config: Config, pid: int) -> tuple[StatusDocument, str] | None:
    """The daemon's document over HTTP (when it serves it on a known port), else its control socket;
    only that daemon's (``pid``): another one may serve the same port."""
    from gpuwatch.cli.remote import fetch
    from gpuwatch.daemon.control import ControlError, fetch_document

    http = config.http
    if http.enabled and http.port:
        host = {"0.0.0.0": "127.0.0.1", "": "127.0.0.1", "::": "[::1]"}.get(http.listen, http.listen)
        host = f"[{host}]" if ":" in host and not host.startswith("[") else host
        document = fetch(f"http://{host}:{http.port}", ASK_TIMEOUT_S).document
        daemon = document.get("daemon") if document is not None else None
        if document is not None and daemon is not None and daemon.get("pid") == pid:
            return document, "HTTP"
    try:
        answer = fetch_document(config.control_socket, ASK_TIMEOUT_S)
    except ControlError:
        return None
    if answer is not None and (answer.get("daemon") or {}).get("pid") == pid:
        return answer, "its control socket"
    return None


def _dir_problem(config: Config) -> str:
    """What is wrong with the runtime directory (full, read-only), as a clause; empty when nothing is."""
    path = config.resolved_runtime_dir
    try:
        fs = os.statvfs(path)
    except OSError as exc:
        return f" (its runtime directory {path}: {exc.strerror or exc})"
    if fs.f_flag & os.ST_RDONLY:
        return f" (its runtime directory {path} is read-only)"
    free = fs.f_bavail * fs.f_frsize
    if free < FULL_BELOW_BYTES or fs.f_favail == 0:
        return f" (its runtime directory {path} is full: {free} bytes free)"
    return ""


class DirectReader:
    """Reads the GPUs the config means, by this process (never the daemon's state).

    Its sampler and sources are built on the first reading and kept for every ``--watch`` refresh: a
    source owns per-GPU reader threads (gpuwatch.deadline, each idling 30 s before it ends), so one built
    per refresh left a new set of threads behind every time (about 27 a second at ``--watch 0.1``). The
    kept source still re-discovers cards that come and go (gpus/amdgpu_source.py).
    """

    def __init__(self, config: Config) -> None:
        self.config = config.with_effective_sysfs()
        self._sampler: Sampler | None = None

    def document(self, processes: bool = False) -> StatusDocument:
        """One reading; with ``processes``, every process holding a GPU too (read twice, 0.25 s apart,
        for engine busy)."""
        from dataclasses import replace

        from gpuwatch.config.base import ConfigError
        from gpuwatch.limits import limits_in_force
        from gpuwatch.model import PublishedState
        from gpuwatch.procfs import ProcError, Procfs
        from gpuwatch.procs.monitor import scan_once
        from gpuwatch.publish.document import to_document
        from gpuwatch.sysfs import Sysfs

        config = self.config
        if self._sampler is None:
            from gpuwatch.daemon.sense import read_directly

            self._sampler = read_directly(config)
        snapshot = self._sampler.sample()
        if processes:
            try:
                rows, unreadable = scan_once(Procfs(config.proc_root), Sysfs(config.sysfs_root))
            except ProcError as exc:
                raise ConfigError(f"cannot list processes: {exc}") from None
            snapshot = replace(snapshot, processes=rows, processes_unreadable=unreadable)
        return to_document(PublishedState(snapshot=snapshot, limits_c=limits_in_force(snapshot, config.thermal)),
                           source="sysfs")


def _direct_note(config: Config, note: str) -> str:
    if not config.simulating:
        return note
    tree = config.simulated_tree_dir
    where = "" if tree.is_dir() else " (absent: the simulator lays it out when the daemon starts)"
    return f"{note}; simulated cards: {tree}{where}"


def show(args: argparse.Namespace, fetch: Fetch, leftovers: Callable[[StatusDocument], list[str]] | None = None) -> int:
    """``leftovers``: what a daemon that did not stop cleanly left behind (cli/leftovers.py), said and exit 1."""
    def once(color: bool) -> tuple[str, int]:
        doc, note = fetch()
        if getattr(args, "gpu", None):  # --gpu GPU (config.base.resolve_gpu)
            try:
                doc = select_gpus(doc, args.gpu)
            except ValueError as exc:
                from gpuwatch.cli.parser import command_parser

                command_parser(args).error(f"--gpu {exc}")
        found = leftovers(doc) if leftovers else []
        view = shown_view(doc)  # once per reading: the text, the process table and the exit code
        text = document_text(doc, args) if args.json else render_view(view, color=color, note=note, leftovers=found,
                                                                      logs=logs_command(args),
                                                                      width=terminal_width())
        for line in found if args.json else ():  # stdout stays one JSON document
            print(f"gpuwatch: {line}", file=sys.stderr)
        if getattr(args, "processes", False) and not args.json:
            from gpuwatch.cli.process_table import processes_text  # here: status's plain form shows none

            text += "\n" + processes_text(view)
        return text, view_exit_code(view, found)

    return repeat(args, once)


def logs_command(args: argparse.Namespace) -> str:
    """`gpuwatch logs` as this status was asked for: with its ``-c FILE`` (what finds that daemon's trainers)."""
    config = getattr(args, "config", None)
    if config is None:
        return "gpuwatch logs"
    import shlex  # here: re under it, for this one quote

    return f"gpuwatch logs -c {shlex.quote(str(config))}"


def document_text(doc: object, args: argparse.Namespace) -> str:
    """Indented for one look; one compact line per document when watching (JSON Lines)."""
    import json

    if args.watch:
        return json.dumps(doc, sort_keys=True, separators=(",", ":")) + "\n"
    return json.dumps(doc, indent=2, sort_keys=True) + "\n"


def repeat(args: argparse.Namespace, once: Callable[[bool], tuple[str, int]]) -> int:
    """Print what ``once(color)`` renders, every ``--watch`` seconds (text: the screen cleared on a terminal, a
    blank line between readings elsewhere) or once; its exit code.

    Colour: ``--color always`` always (it overrides NO_COLOR, as no-color.org asks of an explicit
    option), ``never`` never, ``auto`` on a terminal unless NO_COLOR is set.
    """
    terminal = sys.stdout.isatty()
    color = args.color == "always" or (args.color == "auto" and terminal and "NO_COLOR" not in os.environ)
    first = True
    while True:
        text, code = once(color)
        if args.watch and not args.json:
            # A terminal's screen is redrawn; a pipe or file (`| head`, a log) gets no escape codes, each
            # reading after a blank line, as `vmstat 1` does.
            print("\033[H\033[2J" if terminal else "" if first else "\n", end="")
        first = False
        print(text, end="")
        sys.stdout.flush()
        if not args.watch:
            return code
        time.sleep(args.watch)


def watch_seconds(text: str) -> float:
    """``--watch S``: a refresh period above 0 (argparse turns the error into a usage error, exit 2)."""
    import argparse  # the parser's, which calls this: already imported

    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"{text} must be a number of seconds above 0")
    return value


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
