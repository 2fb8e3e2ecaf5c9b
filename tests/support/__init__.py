"""Helpers the tests import (fixtures are in tests/conftest.py): paths, real captures and trees,
waiting, the fan controller rig, a fixed published state,
child processes (processes.py), the monitoring stack (stack.py) and a notification sink (receiver.py)."""
