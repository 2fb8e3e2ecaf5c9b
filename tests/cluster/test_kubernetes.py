"""deploy/kubernetes: the DaemonSet's shape docs/cluster.md promises, and node-problem-detector's custom plugin
contract (the plugin runs `gpuwatch health --format npd`, whose exit codes and 80 characters it relies on)."""

from __future__ import annotations

import json
import shlex
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuwatch.cli.health import add_health_arguments
from gpuwatch.cli.health.options import common_options
from gpuwatch.config.runtime import client_runtime_dir, default_runtime_dir
from gpuwatch.publish.health_codes import CLASSES
from tests.support.paths import REPO

DEPLOY = REPO / "deploy/kubernetes"


def documents(path: Path) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


def kind(docs: list[dict[str, Any]], name: str) -> dict[str, Any]:
    (found,) = [doc for doc in docs if doc["kind"] == name]
    return found


def test_the_daemonset_runs_the_daemon_privileged_and_npd_read_only() -> None:
    docs = documents(DEPLOY / "gpuwatch-daemonset.yaml")
    assert {doc["kind"] for doc in docs} == {"Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding",
                                             "ConfigMap", "DaemonSet"}
    pod = kind(docs, "DaemonSet")["spec"]["template"]["spec"]
    assert pod["hostPID"] is True and pod["serviceAccountName"] == "gpuwatch"
    containers = {c["name"]: c for c in pod["containers"]}
    daemon, npd = containers["gpuwatch"], containers["node-problem-detector"]
    assert daemon["args"][:1] == ["run"] and daemon["securityContext"]["privileged"] is True
    assert daemon["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert npd["securityContext"] == {"privileged": False, "readOnlyRootFilesystem": True,
                                      "allowPrivilegeEscalation": False}
    mounts = {m["name"]: m for m in npd["volumeMounts"]}
    assert mounts["runtime"]["readOnly"] is True  # NPD only reads the daemon's state file
    assert {m["mountPath"] for m in daemon["volumeMounts"]} >= {"/sys", "/host/proc", "/run/gpuwatch", "/etc/gpuwatch"}
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["runtime"]["emptyDir"] == {"medium": "Memory"}  # shared by the two containers, gone with the pod
    role = kind(docs, "ClusterRole")
    assert {"resources": ["nodes/status"], "verbs": ["patch"], "apiGroups": [""]} in role["rules"]


def test_the_config_in_the_configmap_is_valid_and_matches_the_mounts() -> None:
    from gpuwatch.config.file import parse_config

    data = kind(documents(DEPLOY / "gpuwatch-daemonset.yaml"), "ConfigMap")["data"]
    config = parse_config(tomllib.loads(data["gpuwatch.toml"]), "gpuwatch.toml")
    assert str(config.proc_root) == "/host/proc"


@pytest.mark.parametrize("euid", [0, 1000], ids=["root", "an image with another USER"])
def test_both_containers_find_the_runtime_volume_without_the_config_naming_it(euid: int) -> None:
    """The daemon publishes, and every NPD check looks, in the shared "runtime" volume, with no runtime_dir in the
    config: `gpuwatch health` then never parses it (tomllib was 8-11 ms of every check; cli/health/__init__.py)."""
    docs = documents(DEPLOY / "gpuwatch-daemonset.yaml")
    assert "runtime_dir" not in kind(docs, "ConfigMap")["data"]["gpuwatch.toml"]
    pod = kind(docs, "DaemonSet")["spec"]["template"]["spec"]
    for container in pod["containers"]:
        env = {e["name"]: e["value"] for e in container.get("env", []) if "value" in e}
        (mount,) = [m["mountPath"] for m in container["volumeMounts"] if m["name"] == "runtime"]
        assert default_runtime_dir(env, euid) == mount == "/run/gpuwatch", container["name"]
        assert client_runtime_dir(env, euid, lambda _: False) == mount, container["name"]


def test_the_npd_plugin_contract() -> None:
    data = kind(documents(DEPLOY / "gpuwatch-daemonset.yaml"), "ConfigMap")["data"]
    plugin = json.loads(data["gpuwatch-health.json"])
    assert plugin["plugin"] == "custom"
    settings = plugin["pluginConfig"]
    assert settings["max_output_length"] == 80 and _seconds(settings["timeout"]) <= 15
    conditions = {c["type"] for c in plugin["conditions"]}
    parser = common_options(str)  # as `gpuwatch health`'s own parser (cli/health/__init__.py)
    add_health_arguments(parser)
    classes: dict[str, str | None] = {}
    for rule in plugin["rules"]:
        assert rule["path"].endswith("/gpuwatch") and rule["args"][0] == "health"
        args = parser.parse_args(rule["args"][1:])  # the rule's arguments are what `gpuwatch health` takes
        assert args.format == "npd" and not args.slurm
        assert _seconds(rule["timeout"]) <= _seconds(settings["timeout"])
        if rule["type"] == "permanent":
            assert rule["condition"] in conditions
            classes[rule["condition"]] = args.fault_class
        else:
            assert args.fault_class is None  # the event carries every fault
    # One condition per fault class, each class once (a remediation maps them one to one).
    assert sorted(c for c in classes.values() if c) == sorted(CLASSES) and set(classes) == conditions
    assert {rule["type"] for rule in plugin["rules"]} == {"permanent", "temporary"}


def test_the_monitor_only_patch_drops_every_privilege() -> None:
    (patch,) = documents(DEPLOY / "monitor-only-patch.yaml")
    (daemon,) = patch["spec"]["template"]["spec"]["containers"]
    assert daemon["name"] == "gpuwatch" and "--dry-run" in daemon["args"]
    assert daemon["securityContext"]["privileged"] is False
    assert daemon["volumeMounts"] == [{"name": "sys", "mountPath": "/sys", "readOnly": True}]
    assert shlex.join(daemon["args"]).startswith("run -c /etc/gpuwatch/gpuwatch.toml")


def _seconds(text: str) -> float:
    assert text.endswith("s")
    return float(text[:-1])
