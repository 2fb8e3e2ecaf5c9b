#!/usr/bin/env python3
"""`make mutation`: mutmut on the pure modules, one module at a time with only that module's tests.

Each module is mutated in its own copy of the tree (.mutation/<name>/: gpuwatch/, tests/ and a
pyproject.toml with a [tool.mutmut] section naming the one file and its tests), so a run never touches
the checkout and two modules never share mutmut's state. mutmut runs one test process at a time by
default (MUTATION_JOBS=N for more): the machine is shared. The target (docs/testing.md): no survivor
that changes behaviour; a survivor listed in EQUIVALENT (with the reason it cannot change behaviour)
is accepted, any other fails the run.

    scripts/mutation.py                 # every module in MODULES
    scripts/mutation.py curve governor  # just these
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WORK = ROOT / ".mutation"
MUTMUT = str(Path(sys.executable).with_name("mutmut"))

# tests/test_config.py's pure tests (the others run `gpuwatch` as a process, or read config/, not in the copy)
PURE_CONFIG_TESTS = [f"tests/test_config.py::{t}" for t in (
    "test_bad_config_names_key_value_and_rule",
    "test_missing_file",
    "test_defaults_are_the_seeds_curve_with_a_50_percent_floor",
    "test_validation_messages_name_key_value_and_rule",
    "test_per_gpu_override_merges_only_given_keys",
    "test_client_runtime_dir_finds_the_system_service",
    "test_daemon_files_in_names_the_state_file_and_the_socket",
)]

# name -> (the module, the tests that state its rules)
MODULES: dict[str, tuple[str, list[str]]] = {
    "curve": ("gpuwatch/fan/curve.py", ["tests/fan/test_curve.py"]),
    "governor": ("gpuwatch/power/governor.py", ["tests/power/test_governor.py", "tests/power/test_governor_edges.py"]),
    "limits": ("gpuwatch/limits.py", ["tests/test_limits.py"]),
    "policy": ("gpuwatch/supervise/policy.py", ["tests/supervise/test_policy.py",
                                                "tests/supervise/test_gpu_reset_policy.py",
                                                "tests/supervise/test_policy_transitions.py",
                                                "tests/supervise/test_stop_verb.py",
                                                # its pure tests only (the first one runs a real trainer)
                                                *(f"tests/supervise/test_manual_pause_kept.py::{t}" for t in (
                                                    "test_every_restart_of_a_manually_paused_trainer_comes_back_held",
                                                    "test_a_trainer_that_cannot_cooperate_is_frozen_at_its_restart",
                                                    "test_max_pause_ends_a_manual_pause_and_resume_between_runs_drops_it",
                                                ))]),
    "slots": ("gpuwatch/config/base.py", ["tests/config/test_slots.py", "tests/config/test_rules.py",
                                         *PURE_CONFIG_TESTS]),
    "config": ("gpuwatch/config/file.py", [*PURE_CONFIG_TESTS, "tests/config/test_slots.py",
                                           "tests/config/test_rules.py",
                                           "tests/config/test_unreadable.py::"
                                           "test_an_unreadable_file_is_one_config_error_naming_it"]),
}

# Surviving mutants that cannot change behaviour, by mutmut's name (numbered in source order: a change
# to the function renumbers them; `mutmut show NAME` in .mutation/<module>/ prints one), with the reason.
EQUIVALENT: dict[str, str] = {
    # curve
    "gpuwatch.fan.curve.x_interpolate__mutmut_1":
        "`temp_c < points[0][0]`: at the first point's own temperature the first segment gives s0 + 0 = s0, "
        "and a one-point curve returns its only speed either way",
    "gpuwatch.fan.curve.x_interpolate__mutmut_8": "zip(strict=None): falsy like strict=False",
    "gpuwatch.fan.curve.x_interpolate__mutmut_11": "zip() without strict: strict=False is zip's default",
    "gpuwatch.fan.curve.x_interpolate__mutmut_14":
        "`temp_c < t1`: at a point's own temperature the next segment starts at that point's speed (or the last "
        "point's speed is returned); at most the last bit of a float differs, under what a pwm step can show",
    # governor
    "gpuwatch.power.governor.x__integrated__mutmut_1":
        "`assert ... or ...`: both are set together (_engaged) before _integrated runs; the assert never fails",
    "gpuwatch.power.governor.x__integrated__mutmut_14":
        "`ez <= 0` integrates down: at ez == 0 that adds ki * 0 * dt = 0, as the other branches do",
    "gpuwatch.power.governor.x__integrated__mutmut_22":
        "`ez >= 0` integrates up: at ez == 0 that adds ki * min(0, ...) * dt = 0",
    "gpuwatch.power.governor.x__quantised__mutmut_30":
        "`ez / direction`: direction is +1 or -1 there (a reversal), so / and * agree",
    "gpuwatch.power.governor.x__quantised__mutmut_40":
        "`(settle - applied) / direction`: direction is +1 or -1, so / and * agree",
    "gpuwatch.power.governor.x__filtered__mutmut_2":
        "`dt < 0`: at dt == 0 the EMA step is (1 - exp(0)) * (...) = 0, the previous value unchanged",
    # limits
    "gpuwatch.limits.x_breaches__mutmut_14":
        "`assert ... or ...`: over_limit() is None when either value is, so the assert never sees a None",
    # policy
    "gpuwatch.supervise.policy.x__stopping__mutmut_39":
        "abandoning: run_ended never reads inputs.alive (alive=None instead of False)",
    "gpuwatch.supervise.policy.x__stopping__mutmut_45":
        "abandoning: run_ended never reads inputs.alive (alive=True instead of False)",
    "gpuwatch.supervise.policy.x__stopping__mutmut_42":
        "abandoning: run_ended never reads inputs.alive (alive left as it was)",
    "gpuwatch.supervise.policy.x__stopping__mutmut_43":
        "abandoning keeps inputs.exit_code instead of None: a leader that is still there has none",
    "gpuwatch.supervise.policy.x__waiting__mutmut_23":
        "`\"emergency\" if stopped and False`: a STOPPED trainer only gets this far with after_stop "
        "\"emergency\", which the other branch returns too",
    "gpuwatch.supervise.policy.x__own_pause__mutmut_47":
        "the reason set before _pause is overwritten by enter()'s \"paused ...\"/\"pausing ...\" reason",
    "gpuwatch.supervise.policy.x__own_pause__mutmut_49":
        "the reason set before _pause is overwritten by enter()'s \"paused ...\"/\"pausing ...\" reason",
    # slots
    "gpuwatch.config.base.x_canonical_pci_slot__mutmut_21":
        "`int(function, 17)`: the function is one hex digit (the pattern's [0-9a-f]), the same value in base 17",
    # config
    "gpuwatch.config.file.x__parse_toml__mutmut_9": "decode(\"UTF-8\"): codec names are case-insensitive",
    "gpuwatch.config.file.x__parse_toml__mutmut_13": "`raw.count(b\"\\n\", None, ...)`: a start of None is 0",
    "gpuwatch.config.file.x_format_validation_error__mutmut_13":
        "`loc[:+2]` for `loc[:-2]`: a table-name error's loc is always 4 long ([fan|power, gpus, name, [key]]: "
        "the only tables whose keys are validated), so both are its first two",
    "gpuwatch.config.file.x_format_validation_error__mutmut_15":
        "`loc[+2]` for `loc[-2]`: the loc is 4 long there (see _13), so both are the table's name",
    "gpuwatch.config.file.x_format_validation_error__mutmut_21":
        "the \"(top level)\" spelling: a dict never gets an error with an empty loc (Config has no model "
        "validator; each section's errors name the section)",
    "gpuwatch.config.file.x_format_validation_error__mutmut_22":
        "the \"(top level)\" spelling: unreachable for a dict, see _21",
    "gpuwatch.config.file.x_effective_config_toml__mutmut_6":
        "model_dump(mode=\"XXjsonXX\"): pydantic-core serialises every mode but \"python\" as JSON",
    "gpuwatch.config.file.x_effective_config_toml__mutmut_7":
        "model_dump(mode=\"JSON\"): pydantic-core serialises every mode but \"python\" as JSON",
}


def mutmut_section(module: str, tests: list[str]) -> str:
    args = ", ".join(f'"{t}"' for t in tests)
    return (
        "\n[tool.mutmut]\n"
        'source_paths = ["gpuwatch"]\n'
        f'only_mutate = ["{module}"]\n'
        f"pytest_add_cli_args_test_selection = [{args}]\n"
        'pytest_add_cli_args = ["-p", "no:randomly", "-p", "no:cacheprovider", "-q"]\n'
        "use_git_change_detection = false\n"
    )


def run_module(name: str, jobs: int) -> tuple[dict[str, int], list[str]]:
    """mutmut on one module in its own tree: the counts by outcome, and the unexplained survivors."""
    module, tests = MODULES[name]
    tree = WORK / name
    shutil.rmtree(tree, ignore_errors=True)
    tree.mkdir(parents=True)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    shutil.copytree(ROOT / "gpuwatch", tree / "gpuwatch", ignore=ignore)
    shutil.copytree(ROOT / "tests", tree / "tests", ignore=ignore)
    (tree / "pyproject.toml").write_text((ROOT / "pyproject.toml").read_text() + mutmut_section(module, tests))
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # mutmut puts mutants/ first itself
    run = subprocess.run([MUTMUT, "run", "--max-children", str(jobs)], cwd=tree, env=env,
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if run.returncode != 0:
        sys.exit(f"mutation: mutmut run failed on {module}:\n{run.stderr[-3000:]}")
    listed = subprocess.run([MUTMUT, "results", "--all", "true"], cwd=tree, env=env, capture_output=True,
                            text=True, check=True).stdout
    counts: dict[str, int] = {}
    unexplained: list[str] = []
    for line in listed.splitlines():
        match = re.fullmatch(r"\s*(\S+): (.+)", line)
        if not match:
            continue
        mutant, outcome = match.groups()
        if outcome in ("survived", "no tests") and mutant in EQUIVALENT:
            outcome = "equivalent"
        counts[outcome] = counts.get(outcome, 0) + 1
        if outcome in ("survived", "no tests", "suspicious", "timeout"):
            unexplained.append(f"{mutant}: {outcome}")
    return counts, unexplained


def main(argv: list[str]) -> int:
    names = argv or list(MODULES)
    unknown = [n for n in names if n not in MODULES]
    if unknown:
        print(f"mutation: unknown module(s) {', '.join(unknown)}; known: {', '.join(MODULES)}", file=sys.stderr)
        return 2
    jobs = int(os.environ.get("MUTATION_JOBS", "1"))
    failed = False
    for name in names:
        counts, unexplained = run_module(name, jobs)
        summary = ", ".join(f"{outcome} {n}" for outcome, n in sorted(counts.items()))
        print(f"{name} ({MODULES[name][0]}): {summary}")
        for line in unexplained:
            print(f"  {line}   (`mutmut show` in .mutation/{name}/)")
        failed = failed or bool(unexplained)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
