"""Turn ``gpuwatch train -- python train.py ARGS`` into the launcher's argv, without importing torch.

The CLI (which must never import torch) calls ``build_launch_argv`` and execs the result; the torch
side lives in ``gpuwatch.train.launch``, reached through ``python -m gpuwatch.launch``.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Sequence

FALLBACK_MODES = ("auto", "on", "off")
# Interpreter options passed through in front of ``-m gpuwatch.launch``.
_PY_FLAGS = {"-u", "-O", "-OO", "-B", "-E", "-s", "-S", "-I", "-b", "-bb", "-q", "-v", "-d", "-P"}
_PY_FLAGS_WITH_VALUE = {"-X", "-W"}
_PYTHON_NAME = re.compile(r"python(\d+(\.\d+)?)?")


class LaunchCommandError(ValueError):
    """The training command is not ``[python [flags]] SCRIPT ARGS`` or ``python -m MODULE ARGS``."""


def build_launch_argv(fallback: str, spawn: bool, command: Sequence[str]) -> list[str]:
    """``['python', 'train.py', ...]`` -> ``[python, '-m', 'gpuwatch.launch', ..., 'train.py', ...]``.

    A bare ``python``/``python3`` becomes ``sys.executable``; an interpreter given as a path (another
    virtualenv's python, say) is kept, since that is where the user's torch lives.
    """
    if fallback not in FALLBACK_MODES:
        raise LaunchCommandError(f"--conv2d-fallback must be one of {FALLBACK_MODES}, got {fallback!r}")
    rest = list(command)
    if not rest:
        raise LaunchCommandError("no training command given (expected: -- python train.py ARGS)")
    interpreter = sys.executable
    if _is_python(rest[0]):
        if os.sep in rest[0]:
            interpreter = rest[0]
        rest.pop(0)
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
    argv = [interpreter, *flags, "-m", "gpuwatch.launch", "--conv2d-fallback", fallback]
    if spawn:
        argv.append("--spawn")
    return argv + rest


def _is_python(word: str) -> bool:
    name = os.path.basename(word)
    return bool(_PYTHON_NAME.fullmatch(name)) or name == os.path.basename(sys.executable)
