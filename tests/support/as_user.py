"""Run gpuwatch's CLI or the attach client as another (unprivileged) user, for the who-may-do-what tests.

``python -m tests.support.as_user USER cli ARGS...``, ``... USER attach SOCKET NAME``, ``... USER document SOCKET``
(the status document through the control socket, printed as JSON) or ``... USER hostile MODE SOCKET ...``
(tests/support/hostile_client.py). Started as root,
it imports what it runs first, then drops to USER (groups, gid, uid) and runs it: the test's interpreter
may live where USER cannot read (a root-only pyenv), and what runs needs no further import then
(`cli train ...` too: the real wrapper, whose command must be a program USER can run).
"""

from __future__ import annotations

import json
import os
import pwd
import sys
from pathlib import Path

import psutil  # noqa: F401  (the wrapper kills a tree with it after --grace-s)

import gpuwatch.cli
import gpuwatch.cli.commands
import gpuwatch.cli.parser  # main() imports the parser lazily (the fast `health` path): load it here
import gpuwatch.cli.settings
import gpuwatch.cli.status
import gpuwatch.cli.train.start  # `cli train`: the wrapper's modules (train/argv.py, the link, the run)
import gpuwatch.daemon.control  # imported before the privileges go
import gpuwatch.train.argv
from tests.support import attach_client, hostile_client


def main(argv: list[str]) -> int:
    entry = pwd.getpwnam(argv[0])
    os.initgroups(entry.pw_name, entry.pw_gid)  # its own groups from /etc/group, none of root's
    os.setgid(entry.pw_gid)
    os.setuid(entry.pw_uid)
    if argv[1] == "cli":
        return gpuwatch.cli.main(argv[2:])
    if argv[1] == "hostile":
        return hostile_client.main(argv[2:])
    if argv[1] == "document":
        print(json.dumps(gpuwatch.daemon.control.fetch_document(Path(argv[2]))))
        return 0
    return attach_client.main(argv[2:])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
