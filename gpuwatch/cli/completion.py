"""Shell completion for `gpuwatch` (bash, zsh, fish), generated from the argument parser: one source.

`gpuwatch completion SHELL` prints the script; the package ships them, generated, under
``gpuwatch/cli/completions/`` (scripts/install.sh installs them where each shell looks), and a test keeps
those files equal to what this module generates (``GPUWATCH_UPDATE_COMPLETIONS=1`` rewrites them). It
completes the commands, each command's options, an option's choices (or the words of a metavar such as
``no|on-failure|on-failure:N``), files for a path option, and a positional argument's choices; the values
known only at TAB time (the runs' names and pids, the GPUs) it asks `gpuwatch completion --values KIND` for
(``DYNAMIC_OPTIONS``, ``DYNAMIC_POSITIONALS``), which reads the daemon's state as `status` finds it and
prints one word a line, and nothing at all on any error.
"""

from __future__ import annotations

import argparse
import re
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from gpuwatch.cli.parser import SHELLS as SHELLS  # the parser's choices (it imports this module only to run it)

# Words known only at TAB time (parser.VALUE_KINDS), by the option or the command whose positional argument they fill.
DYNAMIC_OPTIONS = {"--gpu": "gpus"}
DYNAMIC_POSITIONALS = {"pause": "runs", "resume": "runs", "stop": "runs", "restart": "runs", "logs": "runs",
                       "simulate-reset": "gpus"}
FILES = {"bash": "gpuwatch.bash", "zsh": "_gpuwatch", "fish": "gpuwatch.fish"}
HEADER = "generated from gpuwatch's argument parser by gpuwatch/cli/completion.py: do not edit"


@dataclass(frozen=True)
class Option:
    flags: tuple[str, ...]
    help: str
    value: bool = False  # takes a value (the next word)
    choices: tuple[str, ...] = ()
    path: bool = False  # its value is a file or directory
    repeatable: bool = False
    dynamic: str | None = None  # its values come from `gpuwatch completion --values KIND`


@dataclass(frozen=True)
class Command:
    name: str
    help: str
    options: tuple[Option, ...]
    choices: tuple[str, ...] = ()  # of its first positional argument
    files: bool = False  # its positional arguments are files (check-config FILE, train's command line)
    dynamic: str | None = None  # its first positional's values come from `gpuwatch completion --values KIND`


def cmd_completion(args: argparse.Namespace) -> int:
    if args.values:
        print("".join(f"{word}\n" for word in values(args.values)), end="")
        return 0
    if args.shell is None:
        args.parser.error("name the shell: bash, zsh or fish")
    print(script(args.shell, args.root), end="")
    return 0


def values(kind: str) -> list[str]:
    """The words to offer for ``kind`` now: ``runs``, the names and pids of the trainers and attached runs the
    daemon lists (and the configured trainers' names: `logs` needs no daemon); ``gpus``, each GPU's index, slot
    and DRM card, as `--gpu` reads them (config.base.resolve_gpu). Never raises: a TAB shows nothing rather
    than a traceback."""
    try:
        return _values(kind)
    except Exception:  # noqa: BLE001 - anything (a broken config, a daemon going away): no words
        return []


def _values(kind: str) -> list[str]:
    from gpuwatch.cli.settings import load_cli_config
    from gpuwatch.publish.state import read_state

    config = load_cli_config(argparse.Namespace(config=None, sysfs_root=None, proc_root=None), client=True)
    document, _ = read_state(config.state_file)
    if kind == "runs":
        runs = (document or {}).get("trainers", [])
        names = [str(t["name"]) for t in runs] + [t.name for t in config.trainer]
        pids = [str(t["pid"]) for t in runs if t.get("pid")]
        return list(dict.fromkeys(names + pids))
    if kind == "gpus":
        if document is not None:
            here = [(str(g["gpu_id"]), str(g["card"])) for g in document.get("gpus", [])]
        else:
            from gpuwatch.gpus.amdgpu import discover
            from gpuwatch.sysfs import Sysfs

            here = [(c.gpu_id, c.card) for c in discover(Sysfs(config.with_effective_sysfs().sysfs_root)).cards]
        return [str(i) for i in range(len(here))] + [slot for slot, _ in here] + [card for _, card in here]
    return []


def shipped(shell: str) -> str:
    """The script the package ships for ``shell`` (what scripts/install.sh installs)."""
    return resources.files("gpuwatch.cli").joinpath("completions", FILES[shell]).read_text()


def script(shell: str, parser: argparse.ArgumentParser) -> str:
    commands = read_commands(parser)
    return {"bash": bash, "zsh": zsh, "fish": fish}[shell](commands)


def read_commands(parser: argparse.ArgumentParser) -> list[Command]:
    """Every subcommand of ``parser`` with its options, in `--help`'s order."""
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    helps = {a.dest: a.help or "" for a in sub._choices_actions}
    commands = []
    for name, command in sub.choices.items():
        positional = [a for a in command._actions if not a.option_strings]
        choices = tuple(str(c) for c in positional[0].choices or ()) if positional else ()
        files = any(a.type is Path or a.nargs == argparse.REMAINDER for a in positional)
        options = tuple(_option(a) for a in command._actions if a.option_strings and a.help != argparse.SUPPRESS)
        commands.append(Command(name, _one_line(helps.get(name, "")), options, choices, files,
                                DYNAMIC_POSITIONALS.get(name)))
    return commands


def _option(action: argparse.Action) -> Option:
    choices = tuple(str(c) for c in action.choices or ()) or _metavar_words(action.metavar)
    # store_true/version take none; "?" may go without one, so only its choices are offered (--conv2d-fallback)
    value = action.nargs != 0 and (action.nargs != "?" or bool(choices))
    path = action.type is Path or (action.metavar or "") in ("DIR", "FILE")
    dynamic = next((DYNAMIC_OPTIONS[f] for f in action.option_strings if f in DYNAMIC_OPTIONS), None)
    return Option(tuple(action.option_strings), _one_line(action.help or ""), value, choices, path,
                  isinstance(action, argparse._AppendAction) or action.nargs in ("*", "+"), dynamic)


def _metavar_words(metavar: object) -> tuple[str, ...]:
    """``no|on-failure|on-failure:N`` -> ("no", "on-failure"): the literal words of a metavar that lists its
    forms (a placeholder in capitals is the user's to fill)."""
    if not isinstance(metavar, str) or "|" not in metavar:
        return ()
    return tuple(word for word in metavar.split("|") if word == word.lower())


def _one_line(text: str) -> str:
    """A help text fit for a completion menu: its first clause, no markup, no quote."""
    text = re.sub(r"\s+", " ", text.replace("%%", "%")).strip()
    text = text.split(" (")[0].split("; ")[0]
    return re.sub(r"[`'\"\[\]\\$]", "", text)


# ---- bash ----------------------------------------------------------------------------------------
def bash(commands: list[Command]) -> str:
    names = " ".join(c.name for c in commands)
    cases = "\n".join(_bash_case(c) for c in commands)
    return f"""# bash completion for gpuwatch ({HEADER})
_gpuwatch() {{
    local cur prev cmd="" i words
    cur="${{COMP_WORDS[COMP_CWORD]}}"
    prev="${{COMP_WORDS[COMP_CWORD-1]}}"
    for ((i = 1; i < COMP_CWORD; i++)); do
        case "${{COMP_WORDS[i]}}" in
            -*) ;;
            *) cmd="${{COMP_WORDS[i]}}"; break ;;
        esac
    done
    if [[ -z "$cmd" ]]; then
        mapfile -t COMPREPLY < <(compgen -W "-h --help --version {names}" -- "$cur")
        return
    fi
    case "$cmd" in
{cases}
    esac
}}
complete -o default -F _gpuwatch gpuwatch
"""


def _bash_case(command: Command) -> str:
    lines = [f"        {command.name})", '            case "$prev" in']
    for option in command.options:
        if not option.value:
            continue
        flags = "|".join(option.flags)
        if option.dynamic:
            words = _bash_values(option.dynamic)
            lines.append(f'                {flags}) mapfile -t COMPREPLY < <(compgen -W "{words}" -- "$cur"); '
                         'return ;;')
        elif option.choices:
            lines.append(f'                {flags}) mapfile -t COMPREPLY < <(compgen -W "{" ".join(option.choices)}" '
                         '-- "$cur"); return ;;')
        elif option.path:
            lines.append(f'                {flags}) compopt -o filenames 2>/dev/null; '
                         'mapfile -t COMPREPLY < <(compgen -f -- "$cur"); return ;;')
        else:
            lines.append(f"                {flags}) COMPREPLY=(); return ;;")
    options = " ".join(flag for option in command.options for flag in option.flags)
    lines.append("            esac")
    if command.files:  # a word not starting with "-": a file (check-config FILE, train's command line)
        lines.append('            [[ "$cur" != -* ]] && { compopt -o filenames 2>/dev/null; '
                     'mapfile -t COMPREPLY < <(compgen -f -- "$cur"); return; }')
    if command.choices or command.dynamic:  # a word not starting with "-": its positional's choices
        words = _bash_values(command.dynamic) if command.dynamic else " ".join(command.choices)
        lines.append(f'            [[ "$cur" == -* ]] && words="{options}" || words="{words}"')
    else:
        lines.append(f'            words="{options}"')
    lines += ['            mapfile -t COMPREPLY < <(compgen -W "$words" -- "$cur")', "            ;;"]
    return "\n".join(lines)


def _bash_values(kind: str) -> str:
    """The words of ``kind``, asked of the gpuwatch being completed (the first word: a venv's, /usr/local/bin's)."""
    return f'$("${{COMP_WORDS[0]}}" completion --values {kind} 2>/dev/null)'


# ---- zsh -----------------------------------------------------------------------------------------
def zsh(commands: list[Command]) -> str:
    described = "\n".join(f"        '{c.name}:{c.help}'" for c in commands)
    cases = "\n".join(_zsh_case(c) for c in commands)
    return f"""#compdef gpuwatch
# zsh completion for gpuwatch ({HEADER})
_gpuwatch() {{
    local curcontext="$curcontext" state line
    typeset -A opt_args
    local -a commands
    commands=(
{described}
    )
    _arguments -C \\
        '(- *)'{{-h,--help}}'[show help]' \\
        '(- *)--version[show the version]' \\
        '1: :->command' \\
        '*:: :->args'
    case $state in
        command) _describe -t commands 'gpuwatch command' commands ;;
        args)
            case $line[1] in
{cases}
            esac
            ;;
    esac
}}
_gpuwatch "$@"
"""


def _zsh_case(command: Command) -> str:
    specs = [_zsh_spec(option) for option in command.options]
    if command.dynamic:
        specs.append(f"'1:{command.name}:{_zsh_values(command.dynamic)}'")
    elif command.choices:
        specs.append(f"'1:{command.name}:({' '.join(command.choices)})'")
    if command.files:
        specs.append("'*:file:_files'")
    body = " \\\n                        ".join(specs)
    return f"                {command.name}) _arguments \\\n                        {body} ;;"


def _zsh_spec(option: Option) -> str:
    action = ""
    if option.value:
        what = (_zsh_values(option.dynamic) if option.dynamic else "(" + " ".join(option.choices) + ")"
                if option.choices else "_files" if option.path else " ")
        action = f":{option.flags[-1].lstrip('-')}:{what}"
    exclusive = "" if option.repeatable else f"({' '.join(option.flags)})"
    repeat = "*" if option.repeatable else ""
    help_text = f"[{option.help}]"
    if len(option.flags) == 1:
        return f"'{repeat}{exclusive}{option.flags[0]}{help_text}{action}'"
    return f"'{exclusive}'{{{','.join(repeat + f for f in option.flags)}}}'{help_text}{action}'"


def _zsh_values(kind: str) -> str:
    return f"{{compadd - ${{(f)\"$(gpuwatch completion --values {kind} 2>/dev/null)\"}}}}"


# ---- fish ----------------------------------------------------------------------------------------
def fish(commands: list[Command]) -> str:
    names = " ".join(c.name for c in commands)
    lines = [f"# fish completion for gpuwatch ({HEADER})",
             "complete -c gpuwatch -f",
             f'complete -c gpuwatch -n "not __fish_seen_subcommand_from {names}" -s h -l help -d "show help"',
             f'complete -c gpuwatch -n "not __fish_seen_subcommand_from {names}" -l version -d "show the version"']
    for command in commands:
        lines.append(f'complete -c gpuwatch -n "not __fish_seen_subcommand_from {names}" -a {command.name} '
                     f"-d '{command.help}'")
    for command in commands:
        seen = f'-n "__fish_seen_subcommand_from {command.name}"'
        for option in command.options:
            flags = " ".join(f"-s {f[1:]}" if len(f) == 2 else f"-l {f[2:]}" for f in option.flags)
            value = ""
            if option.dynamic:
                value = f" -x -a '{_fish_values(option.dynamic)}'"
            elif option.value:
                value = f" -x -a '{' '.join(option.choices)}'" if option.choices else " -r -F" if option.path else " -x"
            lines.append(f"complete -c gpuwatch {seen} {flags}{value} -d '{option.help}'")
        if command.dynamic:
            lines.append(f"complete -c gpuwatch {seen} -x -a '{_fish_values(command.dynamic)}'")
        elif command.choices:
            lines.append(f"complete -c gpuwatch {seen} -x -a '{' '.join(command.choices)}'")
        if command.files:
            lines.append(f"complete -c gpuwatch {seen} -F")
    return "\n".join(lines) + "\n"


def _fish_values(kind: str) -> str:
    return f"(gpuwatch completion --values {kind} 2>/dev/null)"
