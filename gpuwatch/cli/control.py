"""`gpuwatch pause|resume|restart|stop|simulate-reset [NAME]`: the commands a running daemon carries out, sent
through its control socket, and their exit codes.

Imports no model: the config's ``runtime_dir`` is read alone (config/quick.py) and the whole file only when that
read cannot say; the socket's client half alone (daemon/control_client.py). Issue 52: each within 2x of Python's
own start (tests/cli/test_startup_imports.py pins the imports, benchmarks/cli_latency.py measures them).
"""

from __future__ import annotations

import os
import sys

from gpuwatch.cli.quick_args import EXIT_USAGE
from gpuwatch.config.quick import client_runtime_dir_quick, config_file
from gpuwatch.config.runtime import CONTROL_SOCKET_NAME

TYPE_CHECKING = False
if TYPE_CHECKING:
    import argparse
    from pathlib import Path

NOT_PERMITTED = "not permitted"  # supervise/access.py's, the start of a refusal's message (a test keeps them equal)


def cmd_control(args: argparse.Namespace) -> int:
    from gpuwatch.cli.text import safe
    from gpuwatch.daemon.control_client import ControlError, send_command

    try:
        ok, message = send_command(control_socket(args), args.verb, args.name)
    except ControlError as exc:
        print(f"gpuwatch: {exc}", file=sys.stderr)
        return control_exit(None, str(exc))
    message = safe(message)  # it may quote a run's name or a user's request back
    print(message if ok else f"gpuwatch: {message}", file=sys.stdout if ok else sys.stderr)
    return control_exit(ok, message)


def control_exit(ok: bool | None, message: str) -> int:
    """`pause|resume|stop|restart|simulate-reset`'s exit code (docs/security.md states this table): 0 taken; 1
    refused (``not permitted: ...``) or no daemon answered (``ok`` None); 2 nothing to act on or it cannot be done."""
    if ok:
        return 0
    return 1 if ok is None or message.startswith(NOT_PERMITTED) else EXIT_USAGE


def control_socket(args: argparse.Namespace) -> str | Path:
    """The daemon's control socket: in the config's runtime directory (its quick read), else where a client looks;
    the whole config is loaded only when the quick read cannot say (it then says what is wrong with the file)."""
    runtime_dir = client_runtime_dir_quick(config_file(args.config), simulators=True)
    if runtime_dir is not None:
        return os.path.join(runtime_dir, CONTROL_SOCKET_NAME)
    from gpuwatch.cli.settings import load_cli_config

    return load_cli_config(args, client=True, simulators=True).control_socket
