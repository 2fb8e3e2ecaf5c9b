"""Run gpuwatch's CLI or the attach client as another (unprivileged) user, for the who-may-do-what tests.

``python -m tests.support.as_user USER cli ARGS...`` or ``... USER attach SOCKET NAME``. Started as root,
it imports what it runs first, then drops to USER (groups, gid, uid) and runs it: the test's interpreter
may live where USER cannot read (a root-only pyenv), and what runs needs no further import then.
"""

from __future__ import annotations

import os
import pwd
import sys

import gpuwatch.cli
import gpuwatch.cli.commands
import gpuwatch.cli.settings
import gpuwatch.daemon.control  # noqa: F401  (imported before the privileges go)
from tests.support import attach_client


def main(argv: list[str]) -> int:
    entry = pwd.getpwnam(argv[0])
    os.setgroups([])
    os.setgid(entry.pw_gid)
    os.setuid(entry.pw_uid)
    if argv[1] == "cli":
        return gpuwatch.cli.main(argv[2:])
    return attach_client.main(argv[2:])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
