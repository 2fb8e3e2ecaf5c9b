"""plan_reload: which changed keys apply live and which wait for a restart."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuwatch.config.file import Config, parse_config
from gpuwatch.daemon.reload import plan_reload

RUNNING = parse_config({"interval_s": 1.0, "thermal": {"edge_limit_c": 90}, "runtime_dir": "/run/a"})


@pytest.mark.parametrize(
    "new, live, applied, restart",
    [
        ({"interval_s": 1.0, "thermal": {"edge_limit_c": 90}, "runtime_dir": "/run/a"}, None, (), ()),
        ({"interval_s": 0.5, "thermal": {"edge_limit_c": 80}, "runtime_dir": "/run/a"}, None,
         ("interval_s", "thermal"), ()),
        ({"interval_s": 1.0, "thermal": {"edge_limit_c": 90}, "runtime_dir": "/run/b", "log_level": "debug"},
         None, ("log_level",), ("runtime_dir",)),
        ({"interval_s": 1.0, "thermal": {"edge_limit_c": 90}, "runtime_dir": "/run/a", "fan": {"mode": "off"}},
         None, (), ("fan.mode",)),
        ({"interval_s": 1.0, "thermal": {"edge_limit_c": 90}, "runtime_dir": "/run/a", "fan": {"floor_percent": 40}},
         None, ("fan",), ()),
        ({"interval_s": 1.0, "thermal": {"edge_limit_c": 90}, "runtime_dir": "/run/a", "log_level": "debug"},
         {"interval_s"}, (), ("log_level",)),
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


def test_applied_keys_name_their_consumers() -> None:
    plan = plan_reload(RUNNING, parse_config({"interval_s": 2.0, "thermal": {"edge_limit_c": 80},
                                              "runtime_dir": "/run/a"}))
    assert plan.describe_applied() == ("interval_s (the tick schedule), "
                                       "thermal (the state file, /metrics, the power governor and the supervisor)")


def test_reload_hands_thermal_to_metrics_and_the_supervisor(tmp_path: Path) -> None:
    import os
    import pwd
    import sys
    import urllib.request

    from gpuwatch.daemon.loop import Daemon
    from gpuwatch.sim.tree import FakeSysfsTree
    from tests.support.trees import capture

    tree = FakeSysfsTree(tmp_path / "sys")
    card = tree.add_capture(capture("navi10-rx5700xt-sapphire"))
    tree.write(f"{card.hwmon_dir}/temp1_input", "60000\n")
    trainer = {"name": "t", "command": [sys.executable, "-c", "import time; time.sleep(60)"],
               "user": pwd.getpwuid(os.geteuid()).pw_name, "grace_s": 5}
    data = {"sysfs_root": str(tree.root), "runtime_dir": str(tmp_path / "run"), "fan": {"mode": "monitor-only"},
            "http": {"listen": "127.0.0.1", "port": 0}, "trainer": [trainer]}
    daemon = Daemon(parse_config(data), load=lambda: parse_config(data | {"thermal": {"edge_limit_c": 50}}))
    daemon.start_http()
    try:
        daemon.tick()
        supervisor = daemon.parts.trainers
        assert supervisor is not None and supervisor.trainers[0].machine.hot_since is None  # type: ignore[attr-defined]
        assert daemon.reload()
        # The governor holds the card under the same limit the supervisor pauses at, never the old one.
        # Its tick is given the daemon's live config (no copy to hand over), and holds the limits it names.
        from gpuwatch.limits import thermals_on

        assert thermals_on(daemon.config, card.pci_slot)[0].edge_limit_c == 50
        # /metrics and /status read the limits in force from the published state: the old ones until the
        # next tick (the reload happens between ticks), then the new ones in both.
        def scrape() -> str:
            with urllib.request.urlopen(f"http://127.0.0.1:{daemon.http_port}/metrics", timeout=10) as response:
                return str(response.read().decode())

        limit = f'gpuwatch_gpu_temperature_limit_celsius{{gpu="{card.pci_slot}",sensor="edge"}}'
        over = f'gpuwatch_gpu_thermal_over_limit{{gpu="{card.pci_slot}",sensor="edge"}}'
        assert f"{limit} 90.0" in scrape()
        daemon.tick()
        text = scrape()
        assert f"{limit} 50.0" in text and f"{over} 1.0" in text
        document = daemon.holder.document()
        assert document is not None and document["gpus"][0]["temperatures"]["edge"]["limit_c"] == 50
        # The supervisor judges on the live [thermal] (no copy to hand over): edge 60 °C is hot at 50 °C.
        assert supervisor.trainers[0].machine.hot_since is not None  # type: ignore[attr-defined]
    finally:
        daemon.shutdown()


def test_a_reloaded_fan_section_applies_but_its_mode_waits_for_a_restart() -> None:
    """Issue 32 point 9: [fan] is live (the controller re-derives its settings each tick from the config it is
    given); fan.mode hands fans between the firmware and gpuwatch, so it keeps its running value."""
    new = parse_config({"interval_s": 1.0, "thermal": {"edge_limit_c": 90}, "runtime_dir": "/run/a",
                        "fan": {"mode": "monitor-only", "curve": [[30, 40], [80, 100]], "floor_percent": 30}})
    plan = plan_reload(RUNNING, new)
    assert (plan.applied, plan.needs_restart) == (("fan",), ("fan.mode",))
    assert plan.config.fan == new.fan.model_copy(update={"mode": RUNNING.fan.mode})
    assert plan.describe_applied() == "fan (the fan controller, from its next tick)"
