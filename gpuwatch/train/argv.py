"""Turn ``gpuwatch train -- python train.py ARGS`` into the launcher's argv, without importing torch.

The CLI (which must never import torch) calls ``build_launch_argv`` and execs the result; the torch
side lives in ``gpuwatch.train.launch``, reached through ``python -m gpuwatch.launch``.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

# The conv2d fallback's modes, for `gpuwatch train`, the launcher and patch_conv2d alike.
FallbackMode = Literal["auto", "on", "off"]
FALLBACK_MODES: tuple[FallbackMode, ...] = ("auto", "on", "off")
# Interpreter options that may precede the script.
_PY_FLAGS = {"-u", "-O", "-OO", "-B", "-E", "-s", "-S", "-I", "-b", "-bb", "-q", "-v", "-d", "-P"}
_PY_FLAGS_WITH_VALUE = {"-X", "-W"}
_PYTHON_NAME = re.compile(r"python(\d+(\.\d+)?)?")


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
    heartbeat_file: str | None = None, pause_file: str | None = None,
) -> list[str]:
    """``['python', 'train.py', ...]`` -> ``[python, '-m', 'gpuwatch.launch', ..., 'train.py', ...]``.

    A bare ``python``/``python3`` becomes ``sys.executable``; an interpreter given as a path (another
    virtualenv's python, say) is kept, since that is where the user's torch lives. ``autotune`` and
    ``tune_cache`` are passed on only when they differ from the launcher's defaults; the heartbeat and
    pause files when given (else the launcher reads the supervisor's environment).
    """
    if fallback not in FALLBACK_MODES:
        raise LaunchCommandError(f"--conv2d-fallback must be one of {FALLBACK_MODES}, got {fallback!r}")
    parsed = parse_python_command(command)
    interpreter = parsed.interpreter if parsed.interpreter and os.sep in parsed.interpreter else sys.executable
    argv = [interpreter, *parsed.flags, "-m", "gpuwatch.launch", "--conv2d-fallback", fallback]
    if spawn:
        argv.append("--spawn")
    if not autotune:
        argv += ["--conv2d-autotune", "off"]
    if tune_cache is not None:
        argv += ["--conv2d-tune-cache", tune_cache]
    for option, value in (("--heartbeat-file", heartbeat_file), ("--pause-file", pause_file)):
        if value is not None:
            argv += [option, value]
    return argv + parsed.target


def is_python(word: str) -> bool:
    """``python``, ``python3``, ``python3.11`` or this interpreter, bare or as a path."""
    name = os.path.basename(word)
    return bool(_PYTHON_NAME.fullmatch(name)) or name == os.path.basename(sys.executable)
