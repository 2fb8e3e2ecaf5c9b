"""An attached run's default name from its command line (pure): a file or module name, never code or a value.

The name is published everywhere a run is (/metrics labels, /events, the page, the redacted /status), so it
may say only what kind of program runs, never what it was given: ``python3 -c "main('swordfish42')"`` is
``python3``, not its code (issue 47). The rule, through any wrappers (``env``, ``nohup``, ``sudo -u``,
``srun``, ``torchrun``, ``python -m torch.distributed.run``, ``accelerate launch``, ``deepspeed``, ...):

1. a Python interpreter: the script's stem (``train.py`` -> ``train``), else ``-m``'s module's last part,
   else (``-c CODE``, a REPL) the interpreter's own name;
2. a shell: the script's file name, else (``-c CODE``) the shell's name;
3. a wrapper whose options are known (``WRAPPERS``): its options and their values are skipped, the program
   after them is named by this rule;
4. a launcher whose options are not (``LAUNCHERS``): the first ``*.py`` argument, ``-m``'s module, or a
   program this rule knows (an interpreter, a shell, a wrapper); else the launcher's own name;
5. any other program: its own file name.

An option's value, an environment assignment and an argument after the program are never looked at as a
name. docs/attached-runs.md ("Default names") shows the table; tests/supervise/test_run_name.py holds it.
"""

from __future__ import annotations

import re
from pathlib import PurePath

from gpuwatch.supervise.attached import sanitize

# Wrappers that run the program given after their options, each with its options that take the next
# argument as their value (an option written ``--opt=value`` or ``-ovalue`` is one argument anyway).
WRAPPERS: dict[str, frozenset[str]] = {
    "env": frozenset({"-u", "--unset", "-C", "--chdir", "-S", "--split-string"}),
    "nohup": frozenset(),
    "setsid": frozenset(),
    "nice": frozenset({"-n", "--adjustment"}),
    "ionice": frozenset({"-c", "--class", "-n", "--classdata", "-p", "--pid"}),
    "stdbuf": frozenset({"-i", "-o", "-e"}),
    "time": frozenset({"-f", "--format", "-o", "--output"}),
    "sudo": frozenset({"-u", "--user", "-g", "--group", "-h", "--host", "-p", "--prompt", "-C", "--close-from",
                       "-D", "--chdir", "-r", "--role", "-t", "--type", "-T", "--command-timeout", "-U",
                       "--other-user"}),
    "numactl": frozenset({"-C", "-N", "-m", "-p", "-i", "--physcpubind", "--cpunodebind", "--membind",
                          "--preferred", "--interleave"}),
    "taskset": frozenset(),  # its mask is a positional argument: see _POSITIONALS
    "uv": frozenset({"--python", "-p", "--with", "--project", "--directory", "--env-file"}),
}
# Positional arguments a wrapper takes before the program (``taskset MASK prog``, ``uv run prog``).
_POSITIONALS = {"taskset": 1, "uv": 1}
# Launchers with many options, some of which take values (``torchrun --nproc-per-node 2 train.py``): the
# program is found by what it looks like, never by its position.
LAUNCHERS = frozenset({"torchrun", "accelerate", "deepspeed", "srun", "mpirun", "mpiexec", "horovodrun", "ray"})
# ``python -m MODULE`` where MODULE is a launcher of the same kind.
LAUNCHER_MODULES = frozenset({"torch.distributed.run", "torch.distributed.launch", "accelerate.commands.launch",
                              "deepspeed.launcher.runner"})
SHELLS = frozenset({"sh", "bash", "dash", "zsh", "ksh", "fish"})
_SHELL_VALUE_OPTIONS = frozenset({"-o", "+o", "-O", "+O", "--rcfile", "--init-file"})
# Python's own options that take the next argument (``-W ignore``, ``-X dev``), from python3(1).
_PYTHON_VALUE_OPTIONS = frozenset("WXQ")
_PYTHON = re.compile(r"^(python|pypy)[0-9.]*[a-z]?$")
_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
FALLBACK = "run"


def default_name(argv: list[str]) -> str:
    """The default name of a run of ``argv`` (sanitized, not yet unique)."""
    return sanitize(_name(argv) or FALLBACK)


def _name(argv: list[str]) -> str | None:
    if not argv:
        return None
    program = PurePath(argv[0]).name
    rest = argv[1:]
    if _PYTHON.match(program):
        return _python(program, rest)
    if program in SHELLS:
        return _shell(program, rest)
    if program in WRAPPERS:
        return _wrapper(program, rest) or program
    if program in LAUNCHERS:
        return _scan(rest) or program
    return program


def _python(interpreter: str, args: list[str]) -> str:
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "-" or not arg.startswith("-"):
            return interpreter if arg == "-" else PurePath(arg).stem  # the script (``-``: stdin)
        if arg == "--":
            return PurePath(args[i + 1]).stem if i + 1 < len(args) else interpreter
        if arg.startswith("--"):  # --help, --version...: nothing runs a script
            i += 1
            continue
        for k, letter in enumerate(arg[1:], 1):  # combined short flags: -u, -uB, -Wignore, -um mod, -uc CODE
            if letter == "c":
                return interpreter  # code is never a name
            if letter == "m":
                module = arg[k + 1:] or (args[i + 1] if i + 1 < len(args) else "")
                if not module:
                    return interpreter
                if module in LAUNCHER_MODULES:
                    return _scan(args[i + (1 if arg[k + 1:] else 2):]) or module.rsplit(".", 1)[-1]
                return module.rsplit(".", 1)[-1]
            if letter in _PYTHON_VALUE_OPTIONS:
                if not arg[k + 1:]:
                    i += 1  # its value is the next argument
                break
        i += 1
    return interpreter


def _shell(shell: str, args: list[str]) -> str:
    skip = False
    for arg in args:
        if skip:  # an option's value (``-o pipefail``, ``--rcfile FILE``)
            skip = False
            continue
        if arg in ("-c", "--") or (arg.startswith("-") and "c" in arg[1:] and not arg.startswith("--")):
            return shell  # ``bash -c CODE``: code is never a name (``--`` then a script is rare enough)
        if arg in _SHELL_VALUE_OPTIONS:
            skip = True
        elif not arg.startswith(("-", "+")):
            return PurePath(arg).name  # the script's file name
    return shell


def _wrapper(wrapper: str, args: list[str]) -> str | None:
    takes_value = WRAPPERS[wrapper]
    positionals = _POSITIONALS.get(wrapper, 0)
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "--":
            return _name(args[i + 1:])
        if arg.startswith("-") and len(arg) > 1:
            i += 2 if arg in takes_value else 1
            continue
        if wrapper == "env" and _ASSIGNMENT.match(arg):
            i += 1
            continue
        if positionals:
            positionals -= 1
            i += 1
            continue
        return _name(args[i:])
    return None


def _scan(args: list[str]) -> str | None:
    """A launcher's program, found by its look: a ``*.py`` script, ``-m MODULE``, or a known program."""
    for i, arg in enumerate(args):
        if arg.endswith(".py") and not arg.startswith("-"):
            return PurePath(arg).stem
        if arg in ("-m", "--module") and i + 1 < len(args):
            return args[i + 1].rsplit(".", 1)[-1]
        program = PurePath(arg).name
        if _PYTHON.match(program) or program in SHELLS or program in WRAPPERS or program in LAUNCHERS:
            return _name(args[i:])
    return None
