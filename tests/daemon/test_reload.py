"""plan_reload: which changed keys apply live and which wait for a restart."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuwatch.config import Config, parse_config
from gpuwatch.daemon.reload import plan_reload

RUNNING = parse_config({"interval_s": 1.0, "thermal": {"edge_limit_c": 90}, "runtime_dir": "/run/a"})


@pytest.mark.parametrize(
    "new, live, applied, restart",
    [
        ({"interval_s": 1.0, "thermal": {"edge_limit_c": 90}, "runtime_dir": "/run/a"}, None, (), ()),
        ({"interval_s": 0.5, "thermal": {"edge_limit_c": 80}, "runtime_dir": "/run/a"}, None, ("interval_s", "thermal"), ()),
        ({"interval_s": 1.0, "thermal": {"edge_limit_c": 90}, "runtime_dir": "/run/b", "log_level": "debug"},
         None, ("log_level",), ("runtime_dir",)),
        ({"interval_s": 1.0, "thermal": {"edge_limit_c": 90}, "runtime_dir": "/run/a", "fan": {"mode": "off"}},
         None, (), ("fan",)),
        ({"interval_s": 1.0, "thermal": {"edge_limit_c": 90}, "runtime_dir": "/run/a", "fan": {"mode": "off"}},
         {"fan"}, ("fan",), ()),
    ],
)
def test_plan_reload(new: dict, live: set[str] | None, applied: tuple, restart: tuple) -> None:
    new_config = parse_config(new)
    plan = plan_reload(RUNNING, new_config, live) if live is not None else plan_reload(RUNNING, new_config)
    assert plan.applied == applied
    assert plan.needs_restart == restart
    for key in Config.model_fields:
        source = new_config if key in applied else RUNNING
        assert getattr(plan.config, key) == getattr(source, key)
    assert plan.config.runtime_dir == Path("/run/a")
