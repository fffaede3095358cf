"""Plots are written as PNG files."""

from __future__ import annotations

from pathlib import Path

from xder_eval import plot_accuracy_curves, plot_accuracy_matrix

PNG = b"\x89PNG\r\n\x1a\n"


def test_plots_write_png(tmp_path: Path) -> None:
    rows = [[90.0], [60.0, 80.0], [50.0, 70.0, 95.0]]
    curve = plot_accuracy_curves({"Class-IL": [90, 70, 71.7], "Task-IL": [90, 85, 80]}, tmp_path / "c.png")
    matrix = plot_accuracy_matrix(rows, tmp_path / "m.png")
    for path in (curve, matrix):
        data = path.read_bytes()
        assert data.startswith(PNG)
        assert len(data) > 1000
