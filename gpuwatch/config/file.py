"""The whole configuration file: ``Config`` (every section), loading and validating TOML, and the one-line-
per-problem error a bad file gets (the CLI turns ``ConfigError`` into exit code 2)."""

from __future__ import annotations

import os
import re
import tomllib
from collections.abc import Collection
from pathlib import Path
from typing import Any, Literal

import tomli_w
from pydantic import Field, ValidationError, field_validator

from gpuwatch.config.base import DEFAULT_SYSFS_DEADLINE_S, ConfigError, Strict
from gpuwatch.config.cooling import FanConfig, PowerConfig, ThermalConfig
from gpuwatch.config.quick import CONFIG_ERROR_EXIT as CONFIG_ERROR_EXIT  # its home: quick.py
from gpuwatch.config.quick import RUNTIME_DIR_DEFAULT
from gpuwatch.config.runtime import CONTROL_SOCKET_NAME, STATE_FILE_NAME, default_runtime_dir, default_state_dir
from gpuwatch.config.sections import (
    AmdgpuInfoConfig,
    AttachedConfig,
    ControlConfig,
    HealthConfig,
    HistoryConfig,
    HttpConfig,
    ProcessesConfig,
    ResetsConfig,
    SimulateConfig,
    StatusConfig,
    UnmanagedConfig,
)
from gpuwatch.config.trainer import TrainerConfig

# The machine's own kernel trees: the defaults of the injected roots (sysfs.Sysfs, procfs.Procfs).
REAL_SYSFS_ROOT = Path("/sys")
REAL_PROC_ROOT = Path("/proc")


class Config(Strict):
    """The whole daemon configuration (`/etc/gpuwatch/gpuwatch.toml`)."""

    sysfs_root: Path = REAL_SYSFS_ROOT
    proc_root: Path = REAL_PROC_ROOT
    # auto: amdgpu always (it finds nothing, harmlessly, on NVIDIA boxes) plus NVML when it initialises.
    backend: Literal["auto", "amdgpu", "nvml", "simulated"] = "auto"
    runtime_dir: Path | None = RUNTIME_DIR_DEFAULT  # quick.py's read of it must agree: keep it a plain key
    interval_s: float = Field(default=1.0, gt=0, le=60)
    sysfs_deadline_s: float = Field(default=DEFAULT_SYSFS_DEADLINE_S, gt=0, le=30)
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    thermal: ThermalConfig = ThermalConfig()
    fan: FanConfig = FanConfig()
    power: PowerConfig = PowerConfig()
    http: HttpConfig = HttpConfig()
    status: StatusConfig = StatusConfig()
    simulate: SimulateConfig = SimulateConfig()
    amdgpuinfo: AmdgpuInfoConfig = AmdgpuInfoConfig()
    processes: ProcessesConfig = ProcessesConfig()
    resets: ResetsConfig = ResetsConfig()
    unmanaged: UnmanagedConfig = UnmanagedConfig()
    health: HealthConfig = HealthConfig()
    history: HistoryConfig = HistoryConfig()
    trainer: list[TrainerConfig] = []
    control: ControlConfig = ControlConfig()
    attached: AttachedConfig = AttachedConfig()

    @field_validator("trainer")
    @classmethod
    def _unique_trainer_names(cls, trainers: list[TrainerConfig]) -> list[TrainerConfig]:
        names = [trainer.name for trainer in trainers]
        twice = sorted({name for name in names if names.count(name) > 1})
        if twice:
            raise ValueError("; ".join(f"trainer name {name!r} is used twice; names must be unique" for name in twice))
        return trainers

    def slots_not_present(self, present: Collection[str], tables: bool = True) -> list[str]:
        """One line for each GPU the config names by PCI slot that is not among ``present`` (the GPUs read this
        tick): a ``[fan.gpus]``/``[power.gpus]`` table that applies to nothing (``tables``), or a trainer whose
        limits watch no GPU. The daemon logs them all at start; a trainer's is also a daemon failure
        (`gpuwatch status`, exit 1) while it lasts, since its protection is off there. A table is harmless (one
        config for several machines may name every machine's GPUs), so it is not."""
        found = ", ".join(sorted(present)) or "none found"
        lines = []
        for section, slots in (("fan", self.fan.gpus), ("power", self.power.gpus)) if tables else ():
            lines += [f'[{section}.gpus."{slot}"]: no such GPU on this machine ({found}): its settings apply to nothing'
                      for slot in slots if slot not in present]
        lines += [f"trainer {trainer.name!r} gpus: no GPU {slot} on this machine ({found}): its thermal limits watch "
                  "nothing there" for trainer in self.trainer for slot in trainer.gpus if slot not in present]
        return lines

    @property
    def control_socket(self) -> Path:
        return self.resolved_runtime_dir / CONTROL_SOCKET_NAME

    @property
    def simulating(self) -> bool:
        """``backend = "simulated"`` and ``[simulate] enabled = true`` mean the same."""
        return self.simulate.enabled or self.backend == "simulated"

    @property
    def simulated_tree_dir(self) -> Path:
        return self.simulate.tree_dir or self.resolved_runtime_dir / "simulated-sysfs"

    def with_effective_sysfs(self) -> Config:
        """This config as everything that reads or writes sysfs must see it: when simulating, the
        simulator's trees are the sysfs and proc roots and amdgpu the only backend (the simulated cards
        and their processes are read like real ones, and only them). The daemon and every daemon-side
        command (status, sensors, curve, fans-auto) go through this one rule, so they all mean the same GPUs."""
        if not self.simulating:
            return self
        return self.model_copy(update={"sysfs_root": self.simulated_tree_dir, "proc_root": self.simulated_proc_dir,
                                       "backend": "amdgpu"})

    @property
    def simulated_proc_dir(self) -> Path:
        return self.simulated_tree_dir.with_name(self.simulated_tree_dir.name + "-proc")

    @property
    def reset_dump_dir(self) -> Path:
        """Where copies of the kernel's GPU dumps go: kept across reboots when systemd gives a state dir."""
        if self.resets.dump_dir is not None:
            return self.resets.dump_dir
        state = os.environ.get("STATE_DIRECTORY")
        if state:
            return Path(state.split(":")[0]) / "gpu-resets"
        return self.resolved_runtime_dir / "gpu-resets"

    @property
    def history_dir(self) -> Path:
        """Where the history ring is kept (``[history] dir``, else in the state directory: survives a restart)."""
        if self.history.dir is not None:
            return self.history.dir
        return Path(default_state_dir(os.environ, os.fspath(self.resolved_runtime_dir))) / "history"

    @property
    def state_file(self) -> Path:
        return self.resolved_runtime_dir / STATE_FILE_NAME

    @property
    def resolved_runtime_dir(self) -> Path:
        """``runtime_dir``, else the default for this process (the CLI resolves it once, at load)."""
        if self.runtime_dir is not None:
            return self.runtime_dir
        return Path(default_runtime_dir(os.environ, os.geteuid()))


def load_config(path: str | Path | None, overrides: dict[str, Any] | None = None) -> Config:
    """Read and validate ``path`` (None: defaults only); ``overrides`` (the command line's) win over the file's keys.

    Every way the file can fail to be a configuration is a ConfigError with one line naming the file: missing
    (or gone since the start, at a reload), a directory, unreadable, not UTF-8 (TOML files are UTF-8: a Latin-1
    ``°`` in a comment is a byte 0xb0), not TOML. The daemon then refuses to start, or keeps the running
    configuration at a reload.
    """
    data: dict[str, Any] = {}
    source = "defaults"
    if path is not None:
        source = str(path)
        data = _parse_toml(Path(path), source)
    data.update(overrides or {})
    return parse_config(data, source)


def _parse_toml(path: Path, source: str) -> dict[str, Any]:
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise ConfigError(f"{source}: no such config file") from None
    except IsADirectoryError:
        raise ConfigError(f"{source}: is a directory, not a config file") from None
    except OSError as exc:
        raise ConfigError(f"{source}: cannot read: {exc.strerror or exc}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        raise ConfigError(f"{source}: line {line}: byte 0x{raw[exc.start]:02x} is not UTF-8 text (TOML files are "
                          "UTF-8: save the file as UTF-8)") from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{source}: not valid TOML: {exc}") from None


def parse_config(data: dict[str, Any], source: str = "config") -> Config:
    try:
        return Config.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(format_validation_error(exc, source)) from None


def format_validation_error(exc: ValidationError, source: str) -> str:
    lines = [f"{source}: invalid configuration ({exc.error_count()} problem(s)):"]
    for err in exc.errors():
        loc = [str(part) for part in err["loc"]]
        if loc[-1:] == ["[key]"]:  # a table's name is wrong, e.g. [fan.gpus."bogus"]: name the table
            loc = loc[:-2] + [f'"{loc[-2]}"']
        key = ".".join(loc) or "(top level)"
        rule = err["msg"]
        if err["type"] == "extra_forbidden":
            rule = "unknown key (not a gpuwatch setting; check spelling)"
        rule = rule.removeprefix("Value error, ")
        shown = err.get("input")
        if isinstance(shown, dict) or isinstance(shown, list) and any(isinstance(item, dict) for item in shown):
            # A whole section or a list of [[tables]]: the rule names what is wrong, a dump would bury it.
            lines.append(f"  {key}: {rule}")
        else:
            lines.append(f"  {key} = {shown!r}: {rule}")
    return "\n".join(lines)


def effective_config_toml(config: Config) -> str:
    """The effective configuration as TOML for `gpuwatch check-config`, for a person to read: unset (None) keys
    and empty tables and lists that are empty by default (`trainer = []`, `[fan.gpus]`) are left out, and an
    array of numbers is one line (the fan curve: ``[[64.0, 50.0], [65.0, 60.0], ...]``, not 25 lines). It reads
    back as the same configuration."""
    data = _without_empty_defaults(config.model_dump(mode="json", exclude_none=True),
                                   Config().model_dump(mode="json", exclude_none=True))
    return _NUMBER_ARRAY.sub(_one_line_array, tomli_w.dumps(data))


# tomli_w writes every array one item a line. One of numbers only (nested or not), spanning lines, is put on one:
# a basic string cannot hold a newline, so such a span is never inside one.
_NUMBER_ARRAY = re.compile(r"\[[-\d.,\s\[\]]*\n[-\d.,\s\[\]]*\]")


def _one_line_array(match: re.Match[str]) -> str:
    return re.sub(r"\s+", "", match.group(0)).replace(",]", "]").replace(",", ", ")


def _without_empty_defaults(data: dict[str, Any], defaults: dict[str, Any]) -> dict[str, Any]:
    kept = {}
    for key, value in data.items():
        default = defaults.get(key)
        if isinstance(value, dict) and isinstance(default, dict):
            value = _without_empty_defaults(value, default)
        if value in ([], {}) and key in defaults and default == value:
            continue
        kept[key] = value
    return kept
