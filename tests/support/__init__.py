"""Helpers the tests import (fixtures are in tests/conftest.py): paths, real captures and trees,
waiting, the fan controller rig, a fixed published state,
child processes (processes.py), the monitoring stack (stack.py), a notification sink (receiver.py), the
dashboard's queries (dashboard.py), endpoints that fail like foreign hosts (endpoints.py) and the real
`gpuwatch` command (cli.py)."""
