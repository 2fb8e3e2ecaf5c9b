"""Helpers the tests import (fixtures are in tests/conftest.py): paths, real captures and trees,
waiting, the fan controller rig, a fixed published state,
child processes (processes.py), the monitoring stack (stack.py), a notification sink (receiver.py), the
dashboard's queries (dashboard.py), endpoints that fail like foreign hosts (endpoints.py), the real
`gpuwatch` command (cli.py), distributed training jobs under the real supervisor (ddp.py) with their
gpuwatch-agnostic trainer (ddp_train.py), and for tests/e2e/systemd the Debian root folder
(debian_root.py), the booted container (nspawn.py) and the unit inside it (unit_rig.py)."""
