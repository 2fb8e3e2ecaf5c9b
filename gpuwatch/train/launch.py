"""Run an unmodified training script (runpy, ``__main__`` semantics, its own argv) under the patches.

Order matters: the start method is set and the hooks are installed before the script runs, and
nothing here touches the GPU (the conv2d auto probe waits for the script's first convolution).
The script's own Python children (torchrun's ranks, ``torch.multiprocessing.spawn``, a
``python -m torch.distributed.run`` it starts) get the same patches and hooks: the launcher exports
``argv.injection_env`` to them, and each one's injected sitecustomize calls ``install_from_env``.
"""

from __future__ import annotations

import argparse
import atexit
import logging
import os
import runpy
import shlex
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from gpuwatch.train.argv import (
    FALLBACK_MODES,
    OPTIONS_ENV,
    FallbackMode,
    LaunchCommandError,
    injection_env,
    is_python,
    parse_python_command,
    user_cache_dir,
)
from gpuwatch.train.conv2d.plan import Conv2dTuning
from gpuwatch.train.dataloader import apply_spawn_defaults
from gpuwatch.train.patch import patch_conv2d
from gpuwatch.train.pause.hooks import install_step_hooks
from gpuwatch.train.process_view import show_command, trim_tracebacks, user_command

_VALUE_OPTIONS = ("--heartbeat-file", "--pause-file", "--conv2d-autotune", "--conv2d-tune-cache")
_log = logging.getLogger("gpuwatch.train")


@dataclass(frozen=True)
class LaunchOptions:
    conv2d_fallback: FallbackMode
    spawn: bool
    heartbeat_file: str | None
    pause_file: str | None
    script: str | None  # exactly one of script / module
    module: str | None
    args: list[str]
    python_flags: tuple[str, ...] = ()  # from a "python -u ..." target; only -u can be honoured here
    conv2d_autotune: bool = True
    conv2d_tune_cache: str | None = None  # None: choices stay in memory
    options_argv: tuple[str, ...] = ()  # the launcher's own options as given, for the script's children


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m gpuwatch.launch",
        usage="%(prog)s [options] (SCRIPT | -m MODULE) [ARGS ...]",
        description="Run a PyTorch training script with gpuwatch's training patches.",
    )
    parser.add_argument(
        "--conv2d-fallback",
        choices=FALLBACK_MODES,
        nargs="?",
        const="on",
        default="auto",
        help="im2col Conv2d instead of MIOpen/cuDNN: auto = only if a native probe conv fails (default); "
        "given without a value: on",
    )
    parser.add_argument(
        "--conv2d-autotune",
        choices=("on", "off"),
        default="on",
        help="measure the fallback's MIOpen-free paths per convolution signature and keep the fastest "
        "(default on); off: the fixed, deterministic choice",
    )
    parser.add_argument(
        "--conv2d-tune-cache",
        metavar="DIR",
        default=user_cache_dir(),
        help="keep the measured choices in DIR, per device/driver/torch, so a later run measures nothing "
        "(default: %(default)s); 'none': in memory only",
    )
    parser.add_argument(
        "--spawn", action="store_true", help="spawn start method and persistent DataLoader workers (ROCm-safe)"
    )
    parser.add_argument("--heartbeat-file", help="heartbeat JSON path (default: $GPUWATCH_HEARTBEAT_FILE)")
    parser.add_argument(
        "--pause-file", help="hold at the step boundary while it exists (default: $GPUWATCH_PAUSE_FILE)"
    )
    return parser


def parse_args(argv: Sequence[str]) -> LaunchOptions:
    """Launcher options up to the script (or ``-m MODULE``, or ``--``); the rest belongs to the script.

    The target may also be a whole ``python [flags] SCRIPT ARGS`` command (after ``--``): the
    interpreter is this one, so its name is dropped.
    """
    argv = list(argv)
    index = 0
    while index < len(argv):
        word = argv[index]
        if word == "--":
            target = argv[index + 1 :]
            break
        if word == "-m" or not word.startswith("-"):
            target = argv[index:]
            break
        takes_value = word in _VALUE_OPTIONS
        if word == "--conv2d-fallback":  # its value is optional
            takes_value = index + 1 < len(argv) and argv[index + 1] in FALLBACK_MODES
        index += 2 if takes_value else 1
    else:
        target = []
    parser = _parser()
    known = parser.parse_args(argv[: min(index, len(argv))])
    if not target or target == ["-m"]:
        parser.error("missing the training script (or -m MODULE)")
    flags: list[str] = []
    if is_python(target[0]):
        try:
            command = parse_python_command(target)
        except LaunchCommandError as exc:
            parser.error(str(exc))
        flags, target = command.flags, command.target
    module = target[1] if target[0] == "-m" else None
    return _options(
        known,
        script=None if module else target[0],
        module=module,
        args=target[2:] if module else target[1:],
        python_flags=tuple(flags),
        options_argv=tuple(argv[: min(index, len(argv))]),
    )


def _options(known: argparse.Namespace, **target: Any) -> LaunchOptions:
    return LaunchOptions(
        conv2d_fallback=known.conv2d_fallback,
        spawn=known.spawn,
        heartbeat_file=known.heartbeat_file,
        pause_file=known.pause_file,
        conv2d_autotune=known.conv2d_autotune == "on",
        conv2d_tune_cache=None if known.conv2d_tune_cache == "none" else known.conv2d_tune_cache,
        **target,
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Apply the patches, run the script, undo everything (the script's SystemExit passes through)."""
    options = parse_args(sys.argv[1:] if argv is None else argv)
    _log_to_stderr()
    if "-u" in options.python_flags:
        for stream in (sys.stdout, sys.stderr):
            reconfigure = getattr(stream, "reconfigure", None)
            if reconfigure is not None:
                reconfigure(write_through=True)
    ignored = [flag for flag in options.python_flags if flag != "-u"]
    if ignored:
        _log.warning("python options %s are ignored under the launcher", " ".join(ignored))
    if options.script is not None and not os.path.exists(options.script):
        print(f"python -m gpuwatch.launch: can't open file {options.script!r}", file=sys.stderr)
        return 2
    # ps, htop, nvtop and `status --processes` show the user's command, tracebacks start in the script.
    target = ["-m", options.module] if options.module is not None else [options.script or ""]
    shown = user_command(sys.orig_argv, [*target, *options.args])
    if shown is not None:  # the process is the launcher's (not a caller's main(argv))
        show_command(shown)
        trim_tracebacks()
    saved_env = dict(os.environ)
    uninstall = install(options)
    try:
        os.environ.update(injection_env(os.environ, options.options_argv))
        run_target(options)
    finally:
        uninstall()
        os.environ.clear()
        os.environ.update(saved_env)
    return 0


_installed = False


def install(options: LaunchOptions) -> Callable[[], None]:
    """Spawn defaults, the conv2d patch and the step hooks in this process; returns the undo.

    Once per process: a second call (the injected hook and the launcher in one process) does nothing.
    """
    global _installed
    if _installed:
        return lambda: None
    undo: list[Callable[[], None]] = []

    def uninstall() -> None:
        global _installed
        for step in reversed(undo):
            step()
        _installed = False

    try:
        if options.spawn:
            undo.append(apply_spawn_defaults())
        tuning = Conv2dTuning(autotune=options.conv2d_autotune, cache_dir=options.conv2d_tune_cache)
        undo.append(patch_conv2d(None, options.conv2d_fallback, tuning=tuning).undo)
        hooks = install_step_hooks(options.heartbeat_file, options.pause_file)
        if hooks is not None:
            undo.append(hooks.remove)
            undo.append(hooks.flush)  # undone first: the last steps, however the script ends
    except BaseException:
        uninstall()
        raise
    _installed = True
    return uninstall


def install_from_env() -> None:
    """What the injected sitecustomize calls right after ``import torch``: the launcher's options from
    ``GPUWATCH_LAUNCH_OPTIONS`` (defaults when absent), installed for the rest of the process's life."""
    words = shlex.split(os.environ.get(OPTIONS_ENV, ""))
    try:
        known = _parser().parse_args(words)
    except SystemExit:  # argparse printed the problem; the training runs on without the patches
        return
    atexit.register(install(_options(known, script=None, module=None, args=[])))  # the last steps, at exit


def run_target(options: LaunchOptions) -> None:
    """Run the script or module as ``__main__`` with ``sys.argv``/``sys.path`` as python would set them."""
    saved_argv, saved_path = sys.argv[:], sys.path[:]
    try:
        if options.module is not None:
            sys.argv = [options.module, *options.args]  # run_module puts the module's file in argv[0]
            runpy.run_module(options.module, run_name="__main__", alter_sys=True)
        else:
            assert options.script is not None
            sys.argv = [options.script, *options.args]
            sys.path[0] = os.path.dirname(os.path.realpath(options.script))
            runpy.run_path(options.script, run_name="__main__")
    finally:
        sys.argv, sys.path[:] = saved_argv, saved_path


def _log_to_stderr() -> None:
    logger = logging.getLogger("gpuwatch.train")
    if not logger.handlers and not logging.getLogger().handlers:
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("gpuwatch: %(message)s"))
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)


if __name__ == "__main__":  # python -m gpuwatch.train.launch works as well as python -m gpuwatch.launch
    raise SystemExit(main())
