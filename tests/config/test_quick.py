"""config/quick.py, the pydantic-free read of the config's top-level keys (issue 52): whatever it answers is what
``load_config`` gives for that key, and it says UNSURE for anything else; the defaults it holds are the models'."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuwatch.cli import control, parser, quick_args
from gpuwatch.cli.status import EXIT_USAGE
from gpuwatch.config import quick
from gpuwatch.config.base import ConfigError
from gpuwatch.config.file import CONFIG_ERROR_EXIT, Config, load_config
from gpuwatch.config.trainer import BackoffConfig, TrainerConfig
from gpuwatch.supervise.access import NOT_PERMITTED
from gpuwatch.train.argv import FALLBACK_MODES

REST = '\n[http]\nenabled = false\n[fan]\nmode = "curve"\n'

# (file text, what the quick read says runtime_dir is: a str, None for absent, UNSURE).
CASES: list[tuple[str, object]] = [
    ("", None),
    ("# only a comment\n\n", None),
    ('interval_s = 1.0\nlog_level = "info"\n', None),
    ('runtime_dir = "/run/gw"\n', "/run/gw"),
    ("runtime_dir = '/run/gw'  # literal\n", "/run/gw"),
    ('  runtime_dir="/run/g w"\t# spaced\r\n', "/run/g w"),
    ('runtime_dir = "/run/\\u00e9t\\u00E9"\n', "/run/\u00e9t\u00e9"),
    ('runtime_dir = "C:\\\\dir\\ttab"\n', "C:\\dir\ttab"),
    ('interval_s = 2\nruntime_dir = "/run/gw" # c\nbackend = "amdgpu"\n', "/run/gw"),
    ('[status]\nremote = []\n', None),  # a key of that name in a table is not the top-level one
    ('runtime_dir = "/run/gw"' + REST, "/run/gw"),
    # What the quick read does not take: load_config (or tomllib) says.
    ("runtime_dir = 5\n", quick.UNSURE),
    ('runtime_dir = ""\n', quick.UNSURE),
    ('runtime_dir = "/a"\nruntime_dir = "/b"\n', quick.UNSURE),
    ('runtime_dir = """/run/gw"""\n', quick.UNSURE),
    ('runtime_dir = "/run/gw\n', quick.UNSURE),
    ('runtime_dir = "/run/gw" trailing\n', quick.UNSURE),
    ('runtime_dir = "\\x41"\n', quick.UNSURE),
    ('"runtime_dir" = "/run/gw"\n', quick.UNSURE),
    ('http.enabled = false\nruntime_dir = "/run/gw"\n', quick.UNSURE),
    ('trainer = [\n"[x]"]\nruntime_dir = "/run/gw"\n', quick.UNSURE),
    (b'runtime_dir = "/run/\xb0"\n'.decode("latin-1"), quick.UNSURE),
]


@pytest.mark.parametrize("text, expected", CASES, ids=[repr(text[:40]) for text, _ in CASES])
def test_the_quick_read_agrees_with_load_config(tmp_path: Path, text: str, expected: object) -> None:
    path = tmp_path / "gpuwatch.toml"
    path.write_bytes(text.encode("latin-1" if "\xb0" in text else "utf-8"))
    found = quick.top_level_strings(path.read_bytes(), ("runtime_dir",))
    answer = found if isinstance(found, quick.Unsure) else found["runtime_dir"]
    assert answer == expected or (answer is quick.UNSURE and expected is quick.UNSURE)
    if answer is quick.UNSURE:
        return
    config = load_config(path)  # every file the quick read answers for is one the models take
    assert config.runtime_dir == (Path(answer) if isinstance(answer, str) else None)


@pytest.mark.parametrize("text", ["runtime_dir = 5\n", 'runtime_dir = ""\n', 'runtime_dir = "/a"\nruntime_dir = "/b"\n',
                                  "runtime_dir = [\n", b"runtime_dir = '\xff'\n".decode("latin-1")])
def test_what_the_quick_read_refuses_the_whole_load_says(tmp_path: Path, text: str) -> None:
    """UNSURE leads to load_config, whose one-line error the command prints (exit 2): the quick read never hides
    a broken runtime_dir behind a default."""
    path = tmp_path / "gpuwatch.toml"
    path.write_bytes(text.encode("latin-1"))
    assert quick.configured_runtime_dir(str(path)) is quick.UNSURE or text == 'runtime_dir = ""\n'
    if text != 'runtime_dir = ""\n':  # "" is a path to pydantic ("."), to the quick read one to load whole
        with pytest.raises(ConfigError):
            load_config(path)


def test_tomllib_reads_the_forms_the_quick_read_does_not_take(tmp_path: Path) -> None:
    path = tmp_path / "gpuwatch.toml"
    path.write_text('trainer = []\nruntime_dir = """/run/gw"""\n')
    assert quick.configured_runtime_dir(str(path)) == "/run/gw"
    path.write_text("# runtime_dir named in a comment only\n[http]\nenabled = false\n")
    assert quick.configured_runtime_dir(str(path)) is None
    assert quick.configured_runtime_dir(str(tmp_path / "missing.toml")) is quick.UNSURE


def test_the_defaults_are_the_models_and_the_constants_their_homes() -> None:
    """One home for each default the CLI shows without the models, and the constants the light modules keep beside
    their heavy homes are the same values."""
    assert Config.model_fields["runtime_dir"].default is quick.RUNTIME_DIR_DEFAULT
    assert TrainerConfig.model_fields["grace_s"].default == quick.TRAINER_GRACE_S
    assert BackoffConfig.model_fields["initial_s"].default == quick.BACKOFF_INITIAL_S
    assert (CONFIG_ERROR_EXIT, ConfigError) == (quick.CONFIG_ERROR_EXIT, quick.ConfigError)
    assert parser.FALLBACK_MODES == FALLBACK_MODES
    assert (control.EXIT_USAGE, control.NOT_PERMITTED) == (EXIT_USAGE, NOT_PERMITTED)
    assert quick_args.EXIT_USAGE == EXIT_USAGE
