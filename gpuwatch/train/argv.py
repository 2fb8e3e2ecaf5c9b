"""Turn ``gpuwatch train -- COMMAND`` into what to exec, without importing torch.

The CLI (which must never import torch) calls ``build_train_command`` and execs the result: a
``python SCRIPT`` command becomes ``python .../train/bootstrap.py ... SCRIPT`` (the launcher; the torch side lives in
``gpuwatch.train.launch``); any other command (torchrun, a shell script) runs as given with
``injection_env``, which makes every Python process it starts install the same patches and hooks
(``inject/sitecustomize.py``). The launcher exports the same environment to the script's children.
``user_cache_dir`` is the user cache folder the launcher and the conv2d package share.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from gpuwatch.heartbeat import TRAINER_ENV_DEFAULTS

# The conv2d fallback's modes, for `gpuwatch train`, the launcher and patch_conv2d alike.
FallbackMode = Literal["auto", "on", "off"]
FALLBACK_MODES: tuple[FallbackMode, ...] = ("auto", "on", "off")
# Interpreter options that may precede the script.
_PY_FLAGS = {"-u", "-O", "-OO", "-B", "-E", "-s", "-S", "-I", "-b", "-bb", "-q", "-v", "-d", "-P"}
_PY_FLAGS_WITH_VALUE = {"-X", "-W"}
_PYTHON_NAME = re.compile(r"python(\d+(\.\d+)?)?")
# The folder holding only the injected sitecustomize.py, and what switches it on.
INJECT_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "inject")
# The launcher's entry, run by its path: it works in an interpreter whose environment lacks gpuwatch.
BOOTSTRAP = os.path.join(os.path.dirname(os.path.abspath(__file__)), "bootstrap.py")
INJECT_ENV = "GPUWATCH_INJECT"
OPTIONS_ENV = "GPUWATCH_LAUNCH_OPTIONS"  # the launcher's options, shell-quoted, for every process


class LaunchCommandError(ValueError):
    """The training command is not ``[python [flags]] SCRIPT ARGS`` or ``python -m MODULE ARGS``."""


@dataclass(frozen=True)
class PythonCommand:
    """A training command taken apart: ``interpreter`` is None when the command starts at the script."""

    interpreter: str | None
    flags: list[str]
    target: list[str]  # [script, *args] or ["-m", module, *args]


def parse_python_command(command: Sequence[str]) -> PythonCommand:
    rest = list(command)
    if not rest:
        raise LaunchCommandError("no training command given (expected: -- python train.py ARGS)")
    interpreter = rest.pop(0) if is_python(rest[0]) else None
    flags: list[str] = []
    while rest and rest[0].startswith("-") and rest[0] != "-m":
        flag = rest.pop(0)
        if flag in _PY_FLAGS or (flag[:2] in _PY_FLAGS_WITH_VALUE and len(flag) > 2):
            flags.append(flag)
        elif flag in _PY_FLAGS_WITH_VALUE and rest:
            flags += [flag, rest.pop(0)]
        else:
            raise LaunchCommandError(f"unsupported python option {flag!r}: give a script or -m MODULE")
    if not rest or (rest[0] == "-m" and len(rest) < 2):
        raise LaunchCommandError("no script or -m MODULE in the training command")
    if rest[0] != "-m" and not (rest[0].endswith(".py") or os.path.isfile(rest[0])):
        raise LaunchCommandError(
            f"{rest[0]!r} is not a Python script: the command must be 'python SCRIPT ARGS' or 'python -m MODULE ARGS'"
        )
    return PythonCommand(interpreter, flags, rest)


def build_launch_argv(
    fallback: str, spawn: bool, command: Sequence[str], *, autotune: bool = True, tune_cache: str | None = None,
    heartbeat_file: str | None = None, pause_file: str | None = None, environ: Mapping[str, str] | None = None,
) -> list[str]:
    """``['python', 'train.py', ...]`` -> ``[python, BOOTSTRAP, ..., 'train.py', ...]``.

    The interpreter is the one the caller's shell would run (``resolve_interpreter``: the activated venv's
    ``python``, not gpuwatch's own). That environment need not have gpuwatch: ``bootstrap.py``, run by its
    path, imports this gpuwatch and starts the launcher (``python -m gpuwatch.launch`` works only where
    gpuwatch is installed). ``autotune`` and ``tune_cache`` are passed on only when they differ from the
    launcher's defaults; the heartbeat and pause files when given (else the launcher reads the supervisor's
    environment).
    """
    options = launcher_options(fallback, spawn, autotune=autotune, tune_cache=tune_cache,
                               heartbeat_file=heartbeat_file, pause_file=pause_file)
    parsed = parse_python_command(command)
    interpreter = resolve_interpreter(parsed.interpreter, os.environ if environ is None else environ)
    return [interpreter, *parsed.flags, BOOTSTRAP, *options, *parsed.target]


def resolve_interpreter(interpreter: str | None, environ: Mapping[str, str]) -> str:
    """The interpreter as the caller's shell means it: one given as a path is kept; a bare ``python``/``python3`` is
    looked up in the caller's ``PATH`` (an activated venv or conda env comes first there), as ``sudo``, ``timeout``
    or ``torchrun`` would; a script given without one runs with that ``PATH``'s ``python3`` (what its usual
    ``#!/usr/bin/env python3`` line runs). Never gpuwatch's own interpreter by default: the README keeps torch out
    of the daemon's venv. LaunchCommandError when the name is on no ``PATH`` entry (what the shell would say)."""
    if interpreter is not None and os.sep in interpreter:
        return interpreter
    name = interpreter or "python3"
    found = shutil.which(name, path=environ.get("PATH", os.defpath))
    if found is None:
        raise LaunchCommandError(f"{name!r} is not on your PATH: give the interpreter as a path "
                                 "(-- /path/to/venv/bin/python SCRIPT)")
    return os.path.abspath(found)


def launcher_options(
    fallback: str, spawn: bool, *, autotune: bool = True, tune_cache: str | None = None,
    heartbeat_file: str | None = None, pause_file: str | None = None,
) -> list[str]:
    """The launcher's options for these settings (defaults left out, except the fallback mode)."""
    if fallback not in FALLBACK_MODES:
        raise LaunchCommandError(f"--conv2d-fallback must be one of {FALLBACK_MODES}, got {fallback!r}")
    options = ["--conv2d-fallback", fallback]
    if spawn:
        options.append("--spawn")
    if not autotune:
        options += ["--conv2d-autotune", "off"]
    if tune_cache is not None:
        options += ["--conv2d-tune-cache", tune_cache]
    for option, value in (("--heartbeat-file", heartbeat_file), ("--pause-file", pause_file)):
        if value is not None:
            options += [option, value]
    return options


def build_train_command(
    fallback: str, spawn: bool, command: Sequence[str], environ: Mapping[str, str], *, autotune: bool = True,
    tune_cache: str | None = None, heartbeat_file: str | None = None, pause_file: str | None = None,
) -> tuple[list[str], dict[str, str]]:
    """What ``gpuwatch train`` execs, and with which environment (see the module's docstring)."""
    settings = dict(autotune=autotune, tune_cache=tune_cache, heartbeat_file=heartbeat_file, pause_file=pause_file)
    options = launcher_options(fallback, spawn, **settings)  # type: ignore[arg-type]
    if not command:
        raise LaunchCommandError("no training command given (expected: -- python train.py ARGS, or -- torchrun ...)")
    if is_python(command[0]) or command[0].endswith(".py"):
        argv = build_launch_argv(fallback, spawn, command, environ=environ, **settings)  # type: ignore[arg-type]
        return argv, dict(environ)
    return list(command), injection_env(environ, options)


def injection_env(environ: Mapping[str, str], options: Sequence[str]) -> dict[str, str]:
    """``environ`` plus what makes every Python process started with it install the launcher's patches
    and hooks: the sitecustomize folder first on PYTHONPATH, the switch and the options; torchrun's
    store sharing off unless the user chose otherwise (``heartbeat.TRAINER_ENV_DEFAULTS``)."""
    env = dict(environ)
    rest = [entry for entry in env.get("PYTHONPATH", "").split(os.pathsep) if entry and entry != INJECT_DIR]
    env["PYTHONPATH"] = os.pathsep.join([INJECT_DIR, *rest])
    env[INJECT_ENV] = "1"
    env[OPTIONS_ENV] = shlex.join(options)
    return TRAINER_ENV_DEFAULTS | env


def is_python(word: str) -> bool:
    """``python``, ``python3``, ``python3.11`` or this interpreter, bare or as a path."""
    name = os.path.basename(word)
    return bool(_PYTHON_NAME.fullmatch(name)) or name == os.path.basename(sys.executable)


def user_cache_dir() -> str:
    """gpuwatch's folder in the user's cache, ``$XDG_CACHE_HOME/gpuwatch`` (``~/.cache/gpuwatch``): the
    default home of the autotuning choices (the launcher) and of the compiled host code (conv2d/host.py).
    Here because the launcher and the conv2d package share it, and this module is torch-free."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "gpuwatch")


@dataclass(frozen=True)
class RestartPolicy:
    """`gpuwatch train --restart`: ``no``, or ``on-failure`` (unbounded) / ``on-failure:N`` (N restarts at most)."""

    on_failure: bool = False
    max_restarts: int | None = None

    def __str__(self) -> str:  # as Attach.restart carries it, and as the user wrote it
        if not self.on_failure:
            return "no"
        return "on-failure" if self.max_restarts is None else f"on-failure:{self.max_restarts}"

    def allows(self, restarts_done: int) -> bool:
        return self.on_failure and (self.max_restarts is None or restarts_done < self.max_restarts)


def parse_restart(text: str) -> RestartPolicy:
    """``no`` | ``on-failure`` | ``on-failure:N`` (N >= 1); ValueError saying what is accepted otherwise."""
    if text == "no":
        return RestartPolicy()
    kind, sep, count = text.partition(":")
    if kind == "on-failure" and not sep:
        return RestartPolicy(on_failure=True)
    if kind == "on-failure" and count.isdecimal() and int(count) >= 1:
        return RestartPolicy(on_failure=True, max_restarts=int(count))
    raise ValueError(f"{text!r}: give no, on-failure or on-failure:N (N restarts at most, N >= 1)")
