"""Every test session gets a register of training runs of its own (xder_methods.core.threads), and
its fair shares leave the load of other programs out: runs a test starts share cores only with
each other, never with whatever else this machine is running, so a test's numbers do not depend
on the machine's other work."""

from __future__ import annotations

import os
import shutil
import tempfile

import pytest


def pytest_configure(config: pytest.Config) -> None:
    folder = tempfile.mkdtemp(prefix="xder-test-cpu-share-")
    config.add_cleanup(lambda: shutil.rmtree(folder, ignore_errors=True))
    os.environ["XDER_CPU_SHARE_DIR"] = folder
    os.environ["XDER_CPU_LOAD"] = "ignore"


# ---------------------------------------------------------------------------------------------
# Plots: every figure the toolkit saves, read back before it is closed, and what a reader needs
# of it (tests/eval/test_plot_rendering.py, tests/runs/test_plot_rendering.py).


class SavedFigures:
    """The figures saved while a test ran, by file name (the last one saved under each name)."""

    def __init__(self) -> None:
        self.by_name: dict[str, object] = {}

    def __getitem__(self, name: str):
        return self.by_name[name]

    def __contains__(self, name: str) -> bool:
        return name in self.by_name


@pytest.fixture
def saved_figures(monkeypatch) -> SavedFigures:
    """Records every ``Figure.savefig`` (matplotlib's object API, Agg canvas): the test reads the
    Figure back after the plot function returned, as it was written."""
    from pathlib import Path

    import matplotlib  # the plots extra: every test session installs it, so none may skip

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    saved = SavedFigures()
    original = Figure.savefig

    def savefig(self, fname, *args, **kwargs):
        result = original(self, fname, *args, **kwargs)
        saved.by_name[Path(fname).name] = self
        return result

    monkeypatch.setattr(Figure, "savefig", savefig)
    return saved


def _inside(box, outer, slack: float = 1.0) -> bool:
    return (
        box.x0 >= outer.x0 - slack
        and box.y0 >= outer.y0 - slack
        and box.x1 <= outer.x1 + slack
        and box.y1 <= outer.y1 + slack
    )


def _overlap(a, b, slack: float = 1.0) -> bool:
    return a.x0 < b.x1 - slack and b.x0 < a.x1 - slack and a.y0 < b.y1 - slack and b.y0 < a.y1 - slack


def check_readable(fig, *, run: str | None = None) -> None:
    """What a reader of a saved figure needs, at the size it is written:

    * the suptitle and every axes' title lie inside the figure, and a title covers none of its
      axes' tick labels; every axes (tick labels, labels, title, legend) lies inside the figure;
    * every axes has an x and a y label: a polar (radar) axes, tick labels on its spokes instead;
      a colorbar, the label of its long axis; an axes sharing x with one below, that one's label;
    * a legend inside an axes covers none of its data points (lines) or bars;
    * ``run`` (a run's name), where given, is in the suptitle.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    if not isinstance(fig.canvas, FigureCanvasAgg):
        FigureCanvasAgg(fig)
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    page = fig.bbox
    suptitle = getattr(fig, "_suptitle", None)
    if suptitle is not None and suptitle.get_text():
        box = suptitle.get_window_extent(renderer)
        assert _inside(box, page), f"suptitle {suptitle.get_text()!r} {box} outside the figure {page}"
    if run is not None:
        named = "" if suptitle is None else suptitle.get_text()
        assert run in named, f"the run {run!r} is not named"
    for ax in fig.axes:
        what = f"axes {ax.get_title()!r}"
        title = ax.title
        if title.get_text():
            box = title.get_window_extent(renderer)
            assert _inside(box, page), f"title {title.get_text()!r} {box} outside the figure {page}"
            for label in _drawn_tick_labels(ax):
                if label.get_text():
                    assert not _overlap(box, label.get_window_extent(renderer)), (
                        f"title {title.get_text()!r} covers the tick label {label.get_text()!r}"
                    )
        tight = ax.get_tightbbox(renderer)
        assert _inside(tight, page, slack=2.0), f"{what} {tight} reaches outside the figure {page}"
        if ax.name == "polar":
            spokes = [t.get_text() for t in ax.get_xticklabels()]
            assert spokes, f"{what}: a radar plot without spokes"
            assert all(spokes), f"{what}: a radar plot's spokes need names"
        elif ax.get_label() == "<colorbar>":
            long_axis = ax.get_ylabel() if ax.bbox.height >= ax.bbox.width else ax.get_xlabel()
            assert long_axis, f"a colorbar of {fig.axes[0].get_title()!r} has no label"
        else:
            assert ax.get_ylabel(), f"{what} has no y label"
            siblings = ax.get_shared_x_axes().get_siblings(ax)
            assert any(a.get_xlabel() for a in siblings), f"{what} has no x label"
        _check_legend(ax, renderer)


def _drawn_tick_labels(ax) -> list:
    """The tick labels drawn: those of ticks within the view (matplotlib keeps others around)."""
    labels = []
    for axis in (ax.xaxis, ax.yaxis):
        low, high = sorted(axis.get_view_interval())
        for tick in axis.get_major_ticks():
            if low - 1e-9 <= tick.get_loc() <= high + 1e-9 and tick.label1.get_visible():
                labels.append(tick.label1)
    return labels


def _check_legend(ax, renderer) -> None:
    import numpy as np

    legend = ax.get_legend()
    if legend is None:
        return
    box = legend.get_window_extent(renderer)
    if not _overlap(box, ax.bbox):
        return  # beside the axes
    for line in ax.lines:
        points = line.get_transform().transform(np.column_stack(line.get_data()).astype(float))
        for x, y in points[np.isfinite(points).all(axis=1)]:
            assert not (box.x0 < x < box.x1 and box.y0 < y < box.y1), (
                f"the legend of {ax.get_title()!r} covers a point of {line.get_label()!r}"
            )
    for patch in ax.patches:
        extent = patch.get_window_extent(renderer)
        if extent.width > 0 and extent.height > 0:
            assert not _overlap(box, extent, slack=2.0), f"the legend of {ax.get_title()!r} covers a bar"


@pytest.fixture
def readable():
    """:func:`check_readable`, for the plot tests."""
    return check_readable


# ---------------------------------------------------------------------------------------------
# Plugins: the registries they fill, put back as a fresh process has them
# (tests/cli/test_plugins.py, tests/runs/test_plugins.py). Taken when this file is imported, before
# any test could load a plugin; None in the sessions of a single package, which lack xder-cli.


def _plugin_registries() -> list[dict] | None:
    try:
        import xder_cli.runs.experiments as experiments
        from xder_cli.runs.analyses import registry as analyses
        from xder_data import benchmark as benchmarks
        from xder_methods.core import registry as methods
        from xder_models import _registry as backbones
    except ImportError:
        return None
    return [
        methods._METHODS,
        benchmarks._REGISTRY,
        backbones._REGISTRY,
        experiments._EXPERIMENTS,
        analyses._ANALYSES,
    ]


_REGISTRIES = _plugin_registries()
_FRESH = None if _REGISTRIES is None else [dict(registry) for registry in _REGISTRIES]


def forget_plugins() -> None:
    """Back to the registries of the xder packages alone, no plugin module loaded: as in a fresh
    process (e.g. a Ray worker before it loads the driver's plugins)."""
    import sys

    import xder_cli.runs.plugins as plugins

    assert _REGISTRIES is not None
    assert _FRESH is not None
    for registry, fresh in zip(_REGISTRIES, _FRESH, strict=True):
        registry.clear()
        registry.update(fresh)
    plugins._LOADED.clear()
    for name in [m for m in sys.modules if m.startswith("xder_plugin_")]:
        del sys.modules[name]


@pytest.fixture
def fresh_registries():
    """The test starts and ends with no plugin registered (the registries are per process)."""
    forget_plugins()
    yield forget_plugins
    forget_plugins()


# ---------------------------------------------------------------------------------------------
# Files that would run code: an object whose unpickling runs a shell command (tests/runs/test_rundir.py,
# tests/models/test_resnet_imagenet.py; the data pickles' own planted files are in tests/data).


class Planted:
    """Unpickles as ``os.system("touch <marker>")``: loading it ran code iff ``marker`` exists."""

    def __init__(self, marker) -> None:
        self.marker = marker

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


@pytest.fixture
def planted(tmp_path):
    """A :class:`Planted` object and the marker file its unpickling would create."""
    marker = tmp_path / "ran"
    return Planted(marker), marker


# ---------------------------------------------------------------------------------------------
# Structure: the shape of a package read from its sources (tests/<area>/test_structure.py).


@pytest.fixture(scope="session")
def structure():
    """``tests/structure.py``, the checks of a package's shape that the structure tests share,
    loaded from its path: the sessions import test files by path (``--import-mode=importlib``), so
    no folder of tests is importable by name."""
    import importlib.util
    import sys
    from pathlib import Path

    name = "xder_tests_structure"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, Path(__file__).with_name("structure.py"))
        assert spec is not None
        assert spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module  # its dataclasses look their module up while they are made
        spec.loader.exec_module(module)
    return sys.modules[name]


# ---------------------------------------------------------------------------------------------
# Property tests (hypothesis): the same examples on every run and no time limit per example, so
# that a busy machine cannot fail them; HYPOTHESIS_PROFILE=explore draws new ones, many more.
try:
    from hypothesis import settings
except ImportError:  # nox -s gpu installs only what the GPU script needs: no hypothesis
    pass
else:
    settings.register_profile("xder", derandomize=True, deadline=None, database=None, print_blob=True)
    settings.register_profile("explore", max_examples=2000, deadline=None)
    settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "xder"))
