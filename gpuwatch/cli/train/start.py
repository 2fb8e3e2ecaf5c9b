"""`gpuwatch train` as the run's parent: its run directory, the command's environment and output (its log), the
daemon's socket and the link to it, put together for cli/train/run.py (docs/attached-runs.md).

The daemon's socket is where `gpuwatch status` and `pause` find a daemon (``config.runtime.client_runtime_dir``:
``RUNTIME_DIRECTORY``, ``$XDG_RUNTIME_DIR/gpuwatch``, /tmp/gpuwatch-<uid>, else the service's /run/gpuwatch, else a
running simulator's)
plus ``CONTROL_SOCKET_NAME``; ``--runtime-dir DIR`` names another. The command gets the run's heartbeat
and pause files in its environment (``GPUWATCH_HEARTBEAT_FILE``, ``GPUWATCH_PAUSE_FILE``), in the run's
own directory unless ``--heartbeat-file`` / ``--pause-file`` or the environment already name them (as the
launcher reads them).
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path

from gpuwatch.attach import JOB_ID_MAX_CHARS, TEXT_MAX_CHARS, Attach, Event, log_path_refusal, text_refusal
from gpuwatch.cli.text import safe
from gpuwatch.cli.train.link import AttachLink, hold_window_s
from gpuwatch.cli.train.output import OutputCopy, RotatingLog, log_max_bytes
from gpuwatch.cli.train.run import RunSettings, TrainRun
from gpuwatch.cli.train.run_dir import RunDir, RunDirError, make_run_dir
from gpuwatch.config.runtime import CONTROL_SOCKET_NAME, client_runtime_dir, daemon_files_in
from gpuwatch.heartbeat import HEARTBEAT_ENV, PAUSE_ENV

Build = Callable[[list[str], Mapping[str, str]], tuple[list[str], dict[str, str]]]
SLURM_JOB_ENV = "SLURM_JOB_ID"


def say(line: str) -> None:
    """One line on stderr; a terminal that hung up (SIGHUP, a closed pipe) loses it, never the run."""
    try:
        print(line, file=sys.stderr, flush=True)
    except (OSError, ValueError):
        pass


def socket_path(runtime_dir: Path | None, environ: Mapping[str, str], euid: int) -> Path:
    found = runtime_dir or Path(client_runtime_dir(environ, euid, daemon_files_in, simulators=True))
    return found / CONTROL_SOCKET_NAME


def start_run(args: argparse.Namespace, command: list[str], gpus: list[str], build: Build) -> int:
    attach = not args.no_attach
    run_dir: RunDir | None = None
    if attach:
        try:
            run_dir = make_run_dir(os.environ, os.geteuid(), os.getpid())
        except RunDirError as exc:
            say(f"gpuwatch train: {exc}: this run is not protected")
            attach = False
    heartbeat = _path(args.heartbeat_file, run_dir.heartbeat_file if run_dir else None, HEARTBEAT_ENV)
    pause = _path(args.pause_file, run_dir.pause_file if run_dir else None, PAUSE_ENV)
    env = dict(os.environ)
    for name, path in ((HEARTBEAT_ENV, heartbeat), (PAUSE_ENV, pause)):
        if path is not None:
            env[name] = str(path)
    # The daemon refuses a string with a control character (attach.text_refusal): the command line it shows is
    # sent escaped (a `python -c` script's newlines), a job id it would refuse is left out.
    job_id = os.environ.get(SLURM_JOB_ENV) or None
    # The command's output is kept in the run's directory (`gpuwatch logs NAME`); a path the daemon would refuse
    # (not printable) is kept too, but not sent.
    output = _output_copy(run_dir)
    log_path = str(run_dir.log_file) if output is not None and run_dir is not None else None
    request = Attach(pid=0, argv=[safe(arg)[:TEXT_MAX_CHARS] for arg in command], name=args.name, gpus=gpus or None,
                     restart=str(args.restart),
                     job_id=job_id if job_id and text_refusal(job_id, JOB_ID_MAX_CHARS) is None else None,
                     log_path=log_path if log_path and log_path_refusal(log_path) is None else None)
    euid = os.geteuid()

    def link(pid: int, on_event: Callable[[Event], None]) -> AttachLink | None:
        if not attach or heartbeat is None or pause is None:
            return None
        return AttachLink(lambda: socket_path(args.runtime_dir, os.environ, euid), replace(request, pid=pid),
                          heartbeat, pause, say, on_event, hold_window_s(os.environ)).start()

    settings = RunSettings(command=list(command), restart=args.restart, grace_s=args.grace_s,
                           backoff_s=args.backoff_s, checkpoint_glob=args.checkpoint_glob,
                           resume_args=_split(args.resume_args), heartbeat_file=heartbeat,
                           output_fds=output.child_fds if output is not None else None)
    try:
        return TrainRun(settings, lambda cmd: build(cmd, env), say, link).run()
    finally:
        if output is not None:
            output.close()
        if run_dir is not None:
            run_dir.remove()


def _output_copy(run_dir: RunDir | None) -> OutputCopy | None:
    """The copy of the command's output into the run's log; none without a run directory (the command writes to
    the wrapper's stdout and stderr itself, as with --no-attach)."""
    if run_dir is None:
        return None
    try:
        return OutputCopy(RotatingLog(run_dir.log_file, log_max_bytes(os.environ), say=say), 1, say, 2).start()
    except OSError as exc:  # no pty left (/dev/pts full), no descriptor: the run goes on, its output not kept
        say(f"gpuwatch train: cannot keep a copy of the output ({exc.strerror or exc}): `gpuwatch logs` will not "
            "show this run")
        return None


def _path(given: str | None, own: Path | None, env_name: str) -> Path | None:
    """The option, else the environment's (as the launcher reads it), else the run directory's."""
    inherited = os.environ.get(env_name)
    if given or inherited:
        return Path(given or inherited or "")
    return own


def _split(text: str | None) -> list[str]:
    return shlex.split(text) if text else []
