"""The architecture's import rules (docs/architecture.md "Layering"), checked on the source's imports.

Every import counts: module level, inside functions, under TYPE_CHECKING. The rules:
* each unit (a top-level module or a subpackage) imports only the units ALLOWED names for it;
* the packages of one floor (act: fan, power, supervise; report: publish) never import each other, and
  only the wiring (daemon, cli) knows the simulator;
* a subpackage's ``__init__.py`` imports nothing (importing ``gpuwatch.fan.curve`` must not pull in
  the controller); ``cli/__init__.py`` is the exception: it is the CLI's main (``gpuwatch.cli:main``), and so is
  ``cli/health/__init__.py``, the command ``gpuwatch health`` itself (its fast path: one import fewer);
* there is no import cycle between modules;
* only the train extra imports torch, and ``train/__init__.py`` and ``train/argv.py`` do not.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.paths import REPO

PACKAGE = REPO / "gpuwatch"

LEAVES = {"derived", "model", "sysfs", "procfs", "heartbeat", "attach", "connect", "config", "limits", "actuation",
          "deadline", "safefs"}
# unit -> the units it may import besides itself; "unit.module" allows that one module only.
ALLOWED: dict[str, set[str]] = {
    "__init__": set(),
    "derived": set(),  # what a reading derives from its fields: model's properties, the light view (issue 52)
    "model": {"derived"},
    "sysfs": set(),
    "procfs": set(),
    "safefs": set(),  # files in a directory another user may write, and whether a directory is trusted
    "heartbeat": {"safefs"},  # the daemon reads the trainer's files through it
    "attach": {"connect"},  # the attach protocol: shared by the wrapper (`gpuwatch train`) and the daemon
    "connect": set(),  # connecting to the control socket: every client (the CLI's commands, the wrapper)
    "config": {"publish.health_codes"},  # `[health] off` names the health checks' table (which imports nothing)
    "deadline": set(),
    # every hardware write: restore records (atomic JSON through safefs), the per-GPU deadline workers, and the held
    # setting of the caps and the clock (sysfs: the backends their stored records are given back through)
    "actuation": {"deadline", "safefs", "sysfs"},
    "limits": {"model", "config"},
    "gpus": {"model", "sysfs", "config", "deadline"},  # sense (deadline: bounded reads)
    "procs": {"model", "procfs", "sysfs"},  # sense: who uses which GPU (/proc; KFD's files in sysfs)
    "resets": {"model", "sysfs"},  # sense: GPU resets (devcoredump, uevents) and recovery
    # act on fans (gpus: the amdgpu source locates cards)
    "fan": {"model", "sysfs", "config", "actuation", "deadline", "gpus"},
    # act on power caps (gpus: locate cards, NVML bus ids; limits: the headroom it holds)
    "power": {"model", "sysfs", "config", "limits", "actuation", "deadline", "gpus"},
    # act on the clock ceiling (gpus: locate cards, NVML bus ids; limits: the headroom it holds)
    "clock": {"model", "sysfs", "config", "limits", "actuation", "deadline", "gpus"},
    # act on trainers; FanState only via model
    "supervise": {"model", "config", "limits", "heartbeat", "attach", "safefs", "procfs", "procs"},
    # report: never hardware (no sysfs, gpus, fan, supervise); safefs: the state files read and written
    "publish": {"model", "derived", "config", "limits", "safefs"},
    # plays the kernel (sysfs: the clock files' writes, sim/kernel.py); borrows the pure interpolation
    "sim": {"model", "config", "gpus", "sysfs", "fan.curve"},
    "daemon": {"__init__", *LEAVES, "gpus", "procs", "resets", "fan", "power", "clock", "supervise", "publish",
               "sim"},  # wire
    "cli": {"__init__", *LEAVES, "gpus", "procs", "resets", "fan", "power", "clock", "supervise", "publish", "sim",
            "daemon", "train.argv"},  # face
    "train": {"heartbeat", "safefs"},  # the optional torch extra
    "launch": {"train"},  # `python -m gpuwatch.launch`: a shim into train.launch
    "__main__": {"cli"},
}
# Packages on one floor: none may import another.
FLOORS = [{"fan", "power", "clock", "supervise", "publish"}]
TORCH_FREE_TRAIN = {"gpuwatch.train", "gpuwatch.train.argv"}


def _modules() -> dict[str, Path]:
    """Dotted module name -> file, e.g. ``gpuwatch.fan.curve``, ``gpuwatch.fan`` (its __init__)."""
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


MODULES = _modules()


def _imports(path: Path) -> set[str]:
    """Every module name ``path`` imports; ``from pkg import mod`` counts as ``pkg.mod`` when that is a module."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            assert node.level == 0, f"{path}: relative import"
            for alias in node.names:
                sub = f"{node.module}.{alias.name}"
                names.add(sub if sub in MODULES else node.module)
    return names


def _unit(module: str) -> str:
    """``gpuwatch.fan.curve`` -> ``fan``; ``gpuwatch`` -> ``__init__``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def _allowed(own: str, target: str) -> bool:
    unit = _unit(target)
    if unit == own:
        return True
    rules = ALLOWED[own]
    return unit in rules or ".".join(target.split(".")[1:3]) in rules


def graph() -> dict[str, set[str]]:
    """The module-level import graph of the package (edges inside gpuwatch only)."""
    return {name: {t for t in _imports(path) if t in MODULES and t != name} for name, path in MODULES.items()}


def find_cycle(edges: dict[str, set[str]]) -> list[str] | None:
    """One import cycle as ``[a, b, ..., a]``, or None when the graph has none (depth-first search)."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        path.pop()
        state[node] = 2
        return None

    for node in sorted(edges):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


@pytest.mark.parametrize("module", sorted(MODULES))
def test_module_imports_only_what_its_unit_may(module: str) -> None:
    own = _unit(module)
    assert own in ALLOWED, f"{module}: new unit {own!r}: give it a row in ALLOWED and docs/architecture.md"
    for target in _imports(MODULES[module]):
        if target.split(".")[0] != "gpuwatch":
            continue
        assert _allowed(own, target), f"{module} ({own}) may not import {target} (ALLOWED[{own!r}])"


def test_the_table_keeps_the_floors_apart_and_the_leaves_at_the_bottom() -> None:
    for floor in FLOORS:
        for unit in floor:
            assert not {rule.split(".")[0] for rule in ALLOWED[unit]} & (floor - {unit}), unit
    for leaf in LEAVES:
        # Leaves only, or one named module that itself imports nothing of the package (a table of names).
        modules = {rule for rule in ALLOWED[leaf] if "." in rule}
        assert ALLOWED[leaf] - modules <= LEAVES, f"leaf {leaf} imports a package"
        for rule in modules:
            imported = [t for t in _imports(MODULES[f"gpuwatch.{rule}"]) if t.split(".")[0] == "gpuwatch"]
            assert not imported, f"leaf {leaf} imports {rule}, which imports {imported}"
    assert not {"sysfs", "gpus", "fan", "supervise", "sim"} & ALLOWED["publish"]  # reports never touch hardware
    assert {unit for unit, rules in ALLOWED.items() if "sim" in rules} == {"daemon", "cli"}


def test_subpackage_faces_import_nothing() -> None:
    for name, path in MODULES.items():
        if path.name != "__init__.py" or name in ("gpuwatch", "gpuwatch.cli", "gpuwatch.cli.health"):
            continue
        imports = [n for n in ast.parse(path.read_text()).body if isinstance(n, (ast.Import, ast.ImportFrom))]
        assert imports == [], f"{path} imports {ast.unparse(imports[0])}"


def test_no_import_cycle() -> None:
    assert find_cycle(graph()) is None


@pytest.mark.parametrize(
    "edges, cycle",
    [
        ({"a": {"b"}, "b": {"c"}, "c": set()}, None),
        ({"a": {"b", "c"}, "b": {"c"}, "c": set()}, None),  # a diamond is not a cycle
        ({"a": {"b"}, "b": {"a"}}, ["a", "b", "a"]),
        ({"x": {"a"}, "a": {"b"}, "b": {"c"}, "c": {"a"}}, ["a", "b", "c", "a"]),
        ({"a": {"a"}}, ["a", "a"]),
    ],
)
def test_the_cycle_check_finds_cycles(edges: dict[str, set[str]], cycle: list[str] | None) -> None:
    assert find_cycle(edges) == cycle


def test_the_cycle_check_sees_a_cycle_through_function_level_imports() -> None:
    edges = graph()
    edges["gpuwatch.model"] = edges["gpuwatch.model"] | {"gpuwatch.cli"}  # as if model imported the CLI
    cycle = find_cycle(edges)
    assert cycle is not None and "gpuwatch.model" in cycle and "gpuwatch.cli" in cycle


# The modules that must not import torch: every one outside train/, and train's torch-free faces. (The
# rest of train/ may: no case for them, since there would be nothing to check.)
TORCH_FREE = sorted(m for m in MODULES if _unit(m) != "train" or m in TORCH_FREE_TRAIN)


def _torch_imports(module: str) -> set[str]:
    return {name for name in _imports(MODULES[module]) if name.split(".")[0] in ("torch", "torchvision")}


@pytest.mark.parametrize("module", TORCH_FREE)
def test_only_the_train_extra_imports_torch(module: str) -> None:
    assert not _torch_imports(module), f"{module} imports {sorted(_torch_imports(module))}"


def test_the_torch_rule_sees_the_train_extras_torch_imports() -> None:
    """The check above reads real imports: the train modules it leaves out do import torch."""
    assert set(TORCH_FREE_TRAIN) <= set(TORCH_FREE)
    assert any(_torch_imports(m) for m in MODULES if m not in TORCH_FREE)


def test_cli_does_not_pull_in_torch() -> None:
    code = "import sys, gpuwatch.cli, gpuwatch.daemon.loop; sys.exit('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0
