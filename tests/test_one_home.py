"""One home per rule (docs/architecture.md "One home per rule"): where a rule can be recognised in the
source, a second copy of it fails here. Each check names the rule's home and the copy it catches."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.support.paths import REPO

PACKAGE = REPO / "gpuwatch"


def _docstrings(tree: ast.AST) -> set[int]:
    return {id(node.body[0].value) for node in ast.walk(tree)
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body
            and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)}


def _constants(path: Path) -> list[object]:
    """The constants of a module's code (docstrings left out: prose may name anything)."""
    tree = ast.parse(path.read_text())
    docs = _docstrings(tree)
    return [node.value for node in ast.walk(tree) if isinstance(node, ast.Constant) and id(node) not in docs]


def _daemon_modules() -> list[Path]:
    """Every daemon-side module (the torch extra in train/ runs in the user's training process)."""
    return [path for path in PACKAGE.rglob("*.py") if "train" not in path.relative_to(PACKAGE).parts]


def _where(paths: list[Path], found: object) -> set[str]:
    return {path.relative_to(REPO).as_posix() for path in paths if found(path)}  # type: ignore[operator]


def test_the_restore_file_name_comes_from_actuation() -> None:
    """``actuation.restore_file_path``: a module that spells a ``*-restore.json`` itself has grown a second
    shape of actuator (issue 30)."""
    spelled = _where(_daemon_modules(), lambda path: any(
        isinstance(value, str) and value.endswith("restore.json") for value in _constants(path)))
    assert spelled == {"gpuwatch/actuation/actuator.py"}


def test_only_the_actuation_layer_registers_a_restore_at_exit() -> None:
    registering = _where(_daemon_modules(), lambda path: "import atexit" in path.read_text())
    assert registering == {"gpuwatch/actuation/actuator.py"}


def test_metric_names_and_families_come_from_publish_families() -> None:
    """``publish.families``: the ``gpuwatch_`` prefix and prometheus_client's family classes."""
    prefixed = _where(_daemon_modules(), lambda path: any(
        isinstance(value, str) and value.startswith("gpuwatch_") for value in _constants(path)))
    families = _where(_daemon_modules(), lambda path: "MetricFamily" in path.read_text())
    assert prefixed == families == {"gpuwatch/publish/families.py"}


def test_the_default_pwm_range_is_model_pwm_max_default() -> None:
    """``model.PWM_MAX_DEFAULT``; the simulated card's own pwm1_max file (sim/navi10.py) is the card's value."""
    assert _where(_daemon_modules(), lambda path: 255 in _constants(path)) == {"gpuwatch/model.py",
                                                                                "gpuwatch/sim/navi10.py"}


def test_at_crit_is_model_at_crit() -> None:
    """``model.at_crit``: a comparison against a crit temperature anywhere else is a second copy."""

    def compares_crit(path: Path) -> bool:
        return any(isinstance(node, ast.Compare) and "crit" in ast.unparse(node)
                   and any(isinstance(op, (ast.Gt, ast.GtE, ast.Lt, ast.LtE)) for op in node.ops)
                   for node in ast.walk(ast.parse(path.read_text())))

    assert _where(_daemon_modules(), compares_crit) == {"gpuwatch/model.py"}


def test_no_part_keeps_a_copy_of_live_settings() -> None:
    """The live configuration reaches every part through its tick (issue 30): no ``set_thermal``-style
    hand-over, and no parameter default for a setting whose default lives in config/ (the backstop)."""

    def copies(path: Path) -> bool:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                if node.name.startswith("set_thermal"):
                    return True
                args = node.args.args[len(node.args.args) - len(node.args.defaults):] + [
                    arg for arg, default in zip(node.args.kwonlyargs, node.args.kw_defaults, strict=True) if default]
                if any(arg.arg.endswith("backstop_s") for arg in args):
                    return True
        return False

    assert _where(_daemon_modules(), copies) == set()


def test_the_user_cache_folder_is_train_argv_user_cache_dir() -> None:
    homes = _where(list(PACKAGE.rglob("*.py")), lambda path: "XDG_CACHE_HOME" in _constants(path))
    assert homes == {"gpuwatch/train/argv.py"}


def test_the_pause_rule_is_supervise_machine() -> None:
    """``machine.hot_pause`` and ``machine.may_resume``: when a hot run's pause is due (``debounce_s``, the governor's
    ``governed_backstop_s``) and when it may end (``min_pause_s``) is one rule for configured trainers and attached
    runs (issue 48); a module that compares a time against these settings itself has written the rule again."""
    names = ("debounce_s", "governed_backstop_s", "min_pause_s")

    def weighs_the_rule(path: Path) -> bool:
        return any(isinstance(node, (ast.Compare, ast.Call)) and any(name in ast.unparse(node) for name in names)
                   and (isinstance(node, ast.Compare) or ast.unparse(node.func) == "max")
                   for node in ast.walk(ast.parse(path.read_text())))

    assert _where(_daemon_modules(), weighs_the_rule) == {"gpuwatch/supervise/machine.py"}
