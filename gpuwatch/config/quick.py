"""The settings a command reads without pydantic: their defaults (the models in this package take them from here)
and a quick, validating read of a config file's top-level keys.

`gpuwatch health` (every few seconds on every node of a cluster), `status`, `pause`, `resume` and `stop` need one
key of the whole file while a daemon runs: ``runtime_dir``, where to find it. pydantic's import is a hundred ms,
tomllib's (with typing, datetime and re under it) as much as the rest of a health check; this reads the keys
above the first table header with ``str`` methods alone. It is tolerant of what it does not read (the daemon
validated the whole file at its start; the tables below are not looked at) and strict about what it does: the
answer is only ever what ``load_config`` would give for that key, else ``UNSURE`` and the caller loads the whole
file, which then says what is wrong in its one line (tests/config/test_quick.py checks the two agree). The one
reader of ``runtime_dir`` without the models: `gpuwatch restore` reads a file that does not load with it too, the
lines it cannot take skipped (``broken_file_runtime_dir``). Stdlib only, imported by nothing heavy
(tests/cluster/test_health_imports.py, tests/cli/test_startup_imports.py).
"""

from __future__ import annotations

import os
import sys

from gpuwatch.config.runtime import (
    DEFAULT_CONFIG_PATH,
    SYSTEM_RUNTIME_DIR,
    client_runtime_dir,
    daemon_files_in,
    default_runtime_dir,
    is_simulator_dir,
    simulator_notice,
)

CONFIG_ERROR_EXIT = 2  # the exit code of a command whose config file cannot be used


class ConfigError(Exception):
    """The configuration file cannot be used; the message is meant for the user as is. (Here, not beside the models
    in config/base.py, which re-exports it: `gpuwatch` catches it around every command without importing them.)"""


# The defaults of the keys read here and of the options the CLI's parser shows without loading the models
# (config/file.py, config/trainer.py use these).
RUNTIME_DIR_DEFAULT = None  # None: config.runtime.default_runtime_dir / client_runtime_dir decide
TRAINER_GRACE_S = 120.0  # [[trainer]] grace_s, `train --grace-s`
BACKOFF_INITIAL_S = 10.0  # [[trainer]] backoff.initial_s, `train --backoff-s`
# [[trainer]] log_max_bytes / log_backups, and the size and count of an attached run's log (cli/train/output.py).
TRAINER_LOG_MAX_BYTES = 20 * 1024 * 1024
TRAINER_LOG_MIN_BYTES = 4096
TRAINER_LOG_BACKUPS = 3


class Unsure:
    """The file must be read whole to answer (a form this reader does not take, or a value the models refuse)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "UNSURE"


UNSURE = Unsure()

_BARE_KEY = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-")
# TOML's escapes in a basic string (toml.io v1.0.0, "String"); \u and \U are handled apart.
_ESCAPES = {"b": "\b", "t": "\t", "n": "\n", "f": "\f", "r": "\r", '"': '"', "\\": "\\"}


def config_file(named: str | os.PathLike[str] | None) -> str | None:
    """The config file a command reads: the one named (``-c``), else the default file if it exists, else None (the
    defaults). cli/settings.cli_config_path gives it as a Path to the commands that load the models."""
    if named is not None:
        return os.fspath(named)
    return DEFAULT_CONFIG_PATH if os.path.exists(DEFAULT_CONFIG_PATH) else None


def client_runtime_dir_quick(config_path: str | None, *, simulators: bool = False) -> str | None:
    """Where a client (`health`, `status`, `pause`...) looks for the daemon: the config's ``runtime_dir``, else
    ``config.runtime.client_runtime_dir`` (with ``simulators``, a running simulator when no real daemon runs: said
    on stderr); None when the file must be loaded whole to say (the caller then does, and says what is wrong with
    it)."""
    configured = configured_runtime_dir(config_path) if config_path is not None else RUNTIME_DIR_DEFAULT
    if isinstance(configured, Unsure):
        return None
    if configured:
        return configured
    found = client_runtime_dir(os.environ, os.geteuid(), daemon_files_in, simulators=simulators)
    if simulators and is_simulator_dir(found):
        print(simulator_notice(found), file=sys.stderr)
    return found


def configured_runtime_dir(config_path: str) -> str | None | Unsure:
    """The ``runtime_dir`` the config file at ``config_path`` sets (None: it sets none, the default applies);
    ``UNSURE`` when the file cannot be read or the value is not one ``load_config`` takes as is."""
    try:
        with open(config_path, "rb") as handle:
            data = handle.read()
    except OSError:
        return UNSURE
    value = runtime_dir_in(data)
    if value in (SYSTEM_RUNTIME_DIR, default_runtime_dir(os.environ, os.geteuid())) and b"simulate" in data:
        # A simulating config ([simulate], backend = "simulated") naming a real daemon's directory publishes
        # beside it (runtime.simulator_runtime_dir): the models decide.
        return UNSURE
    return value


def runtime_dir_in(data: bytes) -> str | None | Unsure:
    """The top-level ``runtime_dir`` a config file's bytes set (None: none); ``UNSURE`` when the file is not TOML
    or the value is not a path. The top-level lines alone when they are plain (``top_level_strings``), else
    tomllib's read; a file without the word is not parsed at all."""
    if b"runtime_dir" not in data:
        return RUNTIME_DIR_DEFAULT
    keys = top_level_strings(data, ("runtime_dir",))
    return keys["runtime_dir"] if not isinstance(keys, Unsure) else _tomllib_runtime_dir(data)


def broken_file_runtime_dir(data: bytes) -> str | None:
    """The ``runtime_dir`` of a config file that does not load, read tolerantly (issue 49): `gpuwatch restore`
    falls back to the defaults when the file is broken (ExecStopPost after a rejected reload), and must still
    look where the daemon kept its records. ``runtime_dir_in``, and where that cannot say (TOML that does not
    parse), a plain ``runtime_dir = "<path>"`` line above the first table, the lines it cannot take skipped.
    None: not set, or not an absolute path."""
    value = runtime_dir_in(data)
    if isinstance(value, Unsure):
        keys = top_level_strings(data, ("runtime_dir",), tolerant=True)
        value = None if isinstance(keys, Unsure) else keys["runtime_dir"]
    return value if value is not None and os.path.isabs(value) else None


def _tomllib_runtime_dir(data: bytes) -> str | None | Unsure:
    """A file in a form the quick read does not take (a dotted key, a multi-line value): tomllib's read, whose
    import is as costly as the rest of a health check."""
    import tomllib

    try:
        value = tomllib.loads(data.decode("utf-8")).get("runtime_dir")
    except (UnicodeDecodeError, tomllib.TOMLDecodeError):
        return UNSURE
    return value if value is None or _path_text(value) else UNSURE


def _path_text(value: object) -> bool:
    """A value the models take as a path, as is."""
    return isinstance(value, str) and bool(value) and "\0" not in value


def top_level_strings(data: bytes, keys: tuple[str, ...], *,
                      tolerant: bool = False) -> dict[str, str | None] | Unsure:
    """``keys``' values (None: absent) among the top-level keys of the TOML document ``data``, each a non-empty
    string without NUL; ``UNSURE`` for anything else in the lines above the first table header: a value of another
    type for one of ``keys``, a key twice, a multi-line string, an array or inline table (which may span lines and
    hide a header), a quoted or dotted key, text that is not UTF-8 or not TOML. ``tolerant`` (a file known to be
    broken): those lines are skipped instead, the last of a key twice taken, text that is not UTF-8 replaced."""
    try:
        text = data.decode("utf-8", errors="replace" if tolerant else "strict")
    except UnicodeDecodeError:
        return UNSURE
    found: dict[str, str | None] = dict.fromkeys(keys)
    seen: set[str] = set()
    for raw in text.split("\n"):
        line = raw.strip(" \t\r")
        if not line or line[0] == "#":
            continue
        if line[0] == "[":
            break  # the first table: the top level ends here
        key, equals, rest = line.partition("=")
        key = key.strip(" \t")
        value = _scalar(rest.strip(" \t")) if equals and key and _BARE_KEY.issuperset(key) and (
            tolerant or key not in seen) else UNSURE
        if value is not UNSURE and key in found and (not isinstance(value, str) or not _path_text(value)):
            value = UNSURE  # load_config says what is wrong with it
        if value is UNSURE:
            if tolerant:
                continue
            return UNSURE
        seen.add(key)
        if key in found and isinstance(value, str):  # a path's text: checked above
            found[key] = value
    return found


def _scalar(text: str) -> object:
    """A one-line value and what may follow it on its line (a comment): a string's text, ``True`` for anything else
    that is complete on its line (a number, a boolean, a date), ``UNSURE`` otherwise."""
    if text.startswith(('"""', "'''")) or text[:1] in ("[", "{", ""):
        return UNSURE
    if text[0] == "'":
        end = text.find("'", 1)
        return UNSURE if end < 0 or not _only_comment(text[end + 1:]) else text[1:end]
    if text[0] == '"':
        return _basic_string(text)
    value, _, comment = text.partition("#")
    value = value.strip(" \t")
    if not value or any(c in value for c in "\"'=[]{}") or (comment and any(ord(c) < 32 and c != "\t"
                                                                             for c in comment)):
        return UNSURE
    return True


def _basic_string(text: str) -> str | Unsure:
    out: list[str] = []
    index = 1
    while index < len(text):
        char = text[index]
        if char == '"':
            return "".join(out) if _only_comment(text[index + 1:]) else UNSURE
        if char == "\\":
            code = text[index + 1:index + 2]
            if code in _ESCAPES:
                out.append(_ESCAPES[code])
                index += 2
                continue
            width = {"u": 4, "U": 8}.get(code)
            digits = text[index + 2:index + 2 + width] if width else ""
            if not width or len(digits) != width or not all(c in "0123456789abcdefABCDEF" for c in digits):
                return UNSURE
            point = int(digits, 16)
            if point > 0x10FFFF or 0xD800 <= point <= 0xDFFF:
                return UNSURE
            out.append(chr(point))
            index += 2 + width
            continue
        if ord(char) < 32 and char != "\t" or char == "\x7f":
            return UNSURE  # a control character must be escaped in TOML
        out.append(char)
        index += 1
    return UNSURE  # no closing quote on the line


def _only_comment(text: str) -> bool:
    rest = text.strip(" \t")
    return not rest or rest[0] == "#" and not any(ord(c) < 32 and c != "\t" for c in rest)
