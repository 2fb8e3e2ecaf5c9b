"""`gpuwatch curve`: the configured fan curve as a table and a terminal plot."""

from __future__ import annotations

from gpuwatch.cli.curve import render_curve
from gpuwatch.config.file import parse_config


def test_curve_command_renders_table_and_plot() -> None:
    text = render_curve(parse_config({}).fan)
    assert "floor 50 %" in text and "     95       100" in text and "100% |" in text and "°C" in text
