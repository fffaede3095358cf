"""The published results shipped beside the presets: every entry names a registered method and an
existing preset entry, the X-DER paper's Table 1 is there whole, the DER paper's Seq-CIFAR-10
figures are the issue's, and the lookups the table experiment makes."""

from __future__ import annotations

import dataclasses

import pytest

from xder_cli.runs.errors import SettingError
from xder_cli.runs.experiments.table import table_entries
from xder_cli.runs.presets import default_preset, list_presets, preset_entries, preset_entry
from xder_cli.runs.published import (
    benchmark_paper,
    paper_methods,
    paper_name,
    published_at,
    published_benchmarks,
    published_buffer_sizes,
    published_results,
    published_table,
    table_papers,
    xder_table_methods,
)
from xder_methods import list_methods, method_config_class

XDER_SOURCE = (
    "X-DER paper (Boschini et al., Class-Incremental Continual Learning into the eXtended DER-verse, "
    "TPAMI 2022), Table 1"
)
XDER_COLUMNS = [("seq-cifar100", 500), ("seq-cifar100", 2000), ("seq-miniimg", 2000)]
XDER_COLUMNS += [("seq-miniimg", 5000), ("seq-ntu60", 500)]


def _keeps_a_buffer(method: str) -> bool:
    return "buffer_size" in {f.name for f in dataclasses.fields(method_config_class(method))}


@pytest.mark.parametrize(
    "cell", published_results(), ids=lambda p: f"{p.benchmark}:{p.buffer_size}:{p.entry}"
)
def test_every_entry_names_a_registered_method_and_an_existing_preset_entry(cell) -> None:
    assert cell.method in list_methods()
    assert _keeps_a_buffer(cell.method) is (cell.buffer_size is not None)
    if cell.method == "joint" and cell.source.startswith("X-DER paper"):
        # JT: the X-DER paper lists no hyperparameters for it (no preset entry), so it runs on the
        # benchmark's protocol and the method's defaults: the built-in preset none.
        for preset in ("paper", "tuned"):
            assert not [
                e for e in preset_entries(preset) if e.benchmark == cell.benchmark and e.method == "joint"
            ]
        assert default_preset(cell.benchmark, "joint", None) == "none"
        return
    if cell.method == "joint":  # the DER paper's JOINT: the authors' main.py runs it on sgd's best_args
        assert preset_entry("paper", cell.benchmark, None, "joint").chosen == (
            preset_entry("paper", cell.benchmark, None, "sgd").chosen
        )
    entry = preset_entry("paper", cell.benchmark, cell.buffer_size, cell.entry, method=cell.method)
    assert (entry.name, entry.method) == (cell.entry, cell.method)
    if cell.entry == cell.method:  # a method's own entry is also its default preset
        assert default_preset(cell.benchmark, cell.method, cell.buffer_size) == "paper"


@pytest.mark.parametrize(
    ("benchmark", "buffer_size"),
    [(b, m) for b in published_benchmarks() for m in published_buffer_sizes(b)],
)
def test_the_table_experiment_resolves_every_published_table(benchmark: str, buffer_size: int) -> None:
    table = published_table(benchmark, buffer_size)
    entries = table_entries(benchmark, buffer_size)
    assert [e.name for e in entries] == [p.entry for p in table]
    assert [e.published for e in entries] == table  # each row carries its own published cell
    for e, cell in zip(entries, table, strict=True):
        assert e.method == cell.method
        assert e.preset == (None if e.name == e.method else f"paper:{e.name}")
        assert e.buffered is (cell.buffer_size is not None)
    if (benchmark, buffer_size) == ("seq-cifar100", 500):  # as read off the paper's Table 1 below
        cells = {e.name: e.published for e in entries}
        assert (cells["xder"].faa, cells["xder"].ff) == (49.93, 19.90)


def test_the_x_der_table_is_there_whole() -> None:
    cells = {(p.benchmark, p.buffer_size, p.entry): p for p in published_results() if p.source == XDER_SOURCE}
    assert len(cells) == 3 * 3 + 14 * 5  # JT, FT, LwF.MC per benchmark; 14 rows in 5 columns
    for benchmark, buffer_size in XDER_COLUMNS:
        rows = {entry for (b, m, entry) in cells if (b, m) == (benchmark, buffer_size)}
        paper = {
            e.name
            for e in preset_entries("paper")
            if (e.benchmark, e.buffer_size) == (benchmark, buffer_size)
        }
        assert rows == paper, (benchmark, buffer_size)  # the preset holds every buffered row's values
    for benchmark in ("seq-cifar100", "seq-miniimg", "seq-ntu60"):
        assert {entry for (b, m, entry) in cells if b == benchmark and m is None} == {
            "joint",
            "sgd",
            "lwf_mc",
        }
    # Cells read off the paper's Table 1 by hand.
    assert (cells["seq-cifar100", 500, "xder"].faa, cells["seq-cifar100", 500, "xder"].ff) == (49.93, 19.90)
    assert (cells["seq-miniimg", 5000, "xder-rpc"].faa, cells["seq-miniimg", 5000, "xder-rpc"].ff) == (
        29.91,
        28.29,
    )
    assert cells["seq-miniimg", 5000, "xder-rpc"].row == "X-DER w/ RPC future heads"
    assert cells["seq-miniimg", 5000, "xder-rpc"].method == "xder"
    assert (cells["seq-ntu60", 500, "lucir"].faa, cells["seq-ntu60", 500, "lucir"].ff) == (58.06, 32.58)
    assert (cells["seq-ntu60", None, "sgd"].faa, cells["seq-ntu60", None, "sgd"].ff) == (15.74, 92.85)
    assert (cells["seq-miniimg", None, "joint"].faa, cells["seq-miniimg", None, "joint"].ff) == (53.55, None)
    assert cells["seq-cifar100", 2000, "gdumb"].ff is None  # the paper's "-"
    assert cells["seq-cifar100", 2000, "xder-no-memory-update"].ff == 9.24
    # The paper gives no standard deviation and does not say how many runs it averages.
    assert all(p.faa_std is None and p.ff_std is None and p.seeds is None for p in cells.values())


def test_the_der_paper_seq_cifar10_figures_are_the_issues() -> None:
    der = {(p.buffer_size, p.entry): p for p in published_results() if p.benchmark == "seq-cifar10"}
    assert {key: p.faa for key, p in der.items()} == {
        (None, "joint"): 92.20,
        (None, "sgd"): 19.62,
        (200, "er"): 44.79,
        (200, "der"): 61.93,
        (200, "derpp"): 64.88,
        (200, "icarl"): 49.02,
        (None, "ewc_on"): 19.49,
        (None, "si"): 19.48,
        (None, "lwf"): 19.61,
        (200, "gem"): 25.54,
        (200, "agem"): 20.04,
        (200, "fdr"): 30.91,
        (200, "gss"): 39.07,
        (200, "hal"): 32.36,
        (500, "gem"): 26.20,
        (500, "agem"): 22.67,
        (500, "fdr"): 28.71,
        (500, "gss"): 49.73,
        (500, "hal"): 41.79,
        (500, "er"): 57.74,
        (500, "der"): 70.51,
        (500, "derpp"): 72.70,
        (500, "icarl"): 47.55,
        (5120, "er"): 82.47,
        (5120, "fdr"): 19.70,
        (5120, "der"): 83.81,
        (5120, "derpp"): 85.24,
    }
    assert all(p.ff is None and p.seeds is None for p in der.values())  # the table has no forgetting
    # every row carries the std and the Task-IL FAA with its std, at 5120 too
    with_task_il = {key for key, p in der.items() if None not in (p.faa_std, p.task_il, p.task_il_std)}
    assert with_task_il == set(der)
    assert (der[200, "derpp"].faa_std, der[200, "derpp"].task_il, der[200, "derpp"].task_il_std) == (
        1.17,
        91.92,
        0.60,
    )
    assert (der[None, "ewc_on"].task_il, der[500, "hal"].task_il) == (68.29, 84.54)
    # buffer 5120, as Table 2 prints it (GEM, A-GEM, iCaRL, GSS and HAL there not transcribed yet)
    assert (der[5120, "fdr"].faa_std, der[5120, "fdr"].task_il, der[5120, "fdr"].task_il_std) == (
        0.07,
        94.32,
        0.97,
    )
    assert (der[5120, "er"].faa_std, der[5120, "er"].task_il) == (0.52, 96.98)
    assert (der[5120, "der"].task_il, der[5120, "derpp"].task_il_std) == (95.43, 0.21)
    assert {p.source for p in der.values()} == {
        "DER paper (Buzzega et al., Dark Experience for General Continual Learning: a Strong, Simple "
        "Baseline, NeurIPS 2020), Table 2, Seq-CIFAR-10"
    }


def test_lookups() -> None:
    assert published_benchmarks() == ["seq-cifar100", "seq-miniimg", "seq-ntu60", "seq-cifar10"]
    assert published_buffer_sizes("seq-cifar10") == [200, 500, 5120]
    no_buffer = ["joint", "sgd", "ewc_on", "si", "lwf"]  # one value for every buffer column
    buffered = ["er", "fdr", "der", "derpp"]  # the rows transcribed at 5120
    assert [p.entry for p in published_table("seq-cifar10", 5120)] == [*no_buffer, *buffered]
    assert published_table("seq-digits", 200) == []
    with pytest.raises(
        SettingError, match="no published table at buffer size 300: the published ones are at 200"
    ):
        published_table("seq-cifar10", 300)
    assert xder_table_methods() == (
        "joint",
        "sgd",
        "lwf_mc",
        "er",
        "gdumb",
        "er_ace",
        "rpc",
        "bic",
        "icarl",
        "lucir",
        "der",
        "derpp",
        "xder",
    )
    assert {"published", "published_analyses", "claims"}.isdisjoint(
        list_presets()
    )  # data beside the presets, not presets


def test_the_papers_and_their_methods() -> None:
    assert table_papers() == ["x-der", "der"]
    assert (paper_name("x-der"), paper_name("der")) == ("X-DER paper's Table 1", "DER paper's Table 2")
    assert paper_methods("x-der") == xder_table_methods()
    der = ("joint", "sgd", "ewc_on", "si", "lwf", "er", "gem", "agem", "icarl", "fdr", "gss", "hal")
    assert paper_methods("der") == (*der, "der", "derpp")
    assert [benchmark_paper(b) for b in ("seq-cifar100", "seq-cifar10", "seq-digits", "sources")] == [
        "x-der",
        "der",
        None,
        None,
    ]
    assert published_at("seq-cifar10", 300) == published_at("seq-digits", 200) == []  # never raises
    assert published_at("seq-cifar10", 200) == published_table("seq-cifar10", 200)
    for bad in (lambda: paper_name("mammoth"), lambda: paper_methods("mammoth")):
        with pytest.raises(SettingError, match="'mammoth': no such paper; choose one of x-der, der"):
            bad()


def test_a_papers_methods_on_any_benchmark() -> None:
    """--paper: the paper's registered methods, each with the benchmark's published value where it
    has one at that buffer size; on the benchmark's own paper, its published table as before."""
    der_on_c100 = {e.name: e.published for e in table_entries("seq-cifar100", 500, paper="der")}
    assert list(der_on_c100) == list(paper_methods("der"))
    assert der_on_c100["derpp"].faa == 38.25  # the X-DER paper's figure for seq-cifar100
    assert der_on_c100["gem"] is None
    assert table_entries("seq-cifar10", 200, paper="der") == table_entries("seq-cifar10", 200)
    xder_on_c10 = {e.name: e.published for e in table_entries("seq-cifar10", 300, paper="x-der")}
    assert list(xder_on_c10) == list(xder_table_methods())  # any buffer size: nothing published at 300
    assert set(xder_on_c10.values()) == {None}
    with pytest.raises(SettingError, match="no published table at buffer size 300"):
        table_entries("seq-cifar10", 300, paper="der")  # its own paper: a published buffer size


def test_the_published_analyses_and_a_malformed_file() -> None:
    from xder_cli.runs.published import _parse_analyses, published_analyses

    figures = {(p.buffer_size, p.entry): dict(p.values) for p in published_analyses()}
    # the X-DER paper's secondary-information table, as printed (Sec. 6)
    assert figures[500, "xder"] == {"ss_err": 0.57, "ss_nll": 1.83}
    assert figures[500, "er"] == {"ss_err": 0.71, "ss_nll": 4.00}
    assert figures[2000, "derpp"] == {"ss_err": 0.64, "ss_nll": 2.25}
    assert figures[2000, "xder-no-memory-update"] == {"ss_err": 0.61, "ss_nll": 2.10}
    assert len(figures) == 16
    source = {"sources": {"s": {"paper": "P", "table": "T"}}}
    good = source | {"seq-cifar100": {"m500": {"source": "s", "xder": {"ss_err": 0.5}}}}
    assert _parse_analyses(good)[0].values == {"ss_err": 0.5}
    bad = [
        (source | {"seq-cifar100": {"m500": {"source": "s", "xder": {"faa": 1.0}}}}, "needs figures among"),
        (
            source | {"seq-cifar100": {"m500": {"source": "x", "xder": {"ss_err": 1}}}},
            "names no known source",
        ),
        (source | {"seq-cifar100": {"all": {"source": "s"}}}, "is not a buffer column"),
        (source | {"seq-cifar100": {"m500": {"source": "s", "xder": {"ss_err": "a"}}}}, "must be a number"),
        ({"sources": {"s": {"paper": "P"}}}, "needs paper and table"),
    ]
    for data, message in bad:
        with pytest.raises(ValueError, match=message):
            _parse_analyses(data)


def test_every_published_section_is_of_a_registered_benchmark_and_a_known_source() -> None:
    from xder_cli.runs.published import _load_raw
    from xder_data import list_benchmarks

    sections = {name: table for name, table in _load_raw().items() if name != "sources"}
    assert set(sections) >= {
        "seq-cifar10",
        "seq-mnist",
        "seq-tinyimg",
        "perm-mnist",
        "rot-mnist",
        "mnist-360",
    }
    for benchmark, table in sections.items():
        assert benchmark in list_benchmarks(), benchmark
        assert table["source"] in table_papers(), benchmark


def test_the_der_papers_benchmarks_without_figures_take_the_rows_its_preset_holds() -> None:
    """seq-mnist and seq-tinyimg: the DER paper's (their sections name it) with no figure transcribed:
    `experiment table` takes the methods the authors ran there (best_args, the paper preset), the
    paper's row order first, each with its paper entry and no published value."""
    assert [benchmark_paper(b) for b in ("seq-mnist", "seq-tinyimg")] == ["der", "der"]
    assert {"seq-mnist", "seq-tinyimg"}.isdisjoint(published_benchmarks())  # no figure
    table2 = ["joint", "sgd", "ewc_on", "si", "lwf", "er", "gem", "agem", "icarl", "fdr", "gss", "hal"]
    mnist = table_entries("seq-mnist", 500)
    assert [e.name for e in mnist] == [*table2, "der", "derpp", "mer", "agem_r", "pnn"]
    assert table_entries("seq-mnist", 500, paper="der") == mnist
    assert all(e.published is None and e.preset is None for e in mnist)
    assert all(default_preset("seq-mnist", e.method, 500) == "paper" for e in mnist)
    # Table 2's "-" on Seq-Tiny-ImageNet: no GEM, GSS or HAL (best_args hold none)
    tiny = [e.name for e in table_entries("seq-tinyimg", 5120)]
    assert tiny == [
        "joint",
        "sgd",
        "ewc_on",
        "si",
        "lwf",
        "er",
        "agem",
        "icarl",
        "fdr",
        "der",
        "derpp",
        "agem_r",
        "pnn",
    ]
    with pytest.raises(SettingError, match="seq-mnist has no published figures, and the paper preset holds"):
        table_entries("seq-mnist", 300)
    # Domain-IL: no LwF or iCaRL (Table 2's "-"); MNIST-360: the methods that need no boundaries
    domain = [
        "joint",
        "sgd",
        "ewc_on",
        "si",
        "er",
        "gem",
        "agem",
        "fdr",
        "gss",
        "hal",
        "der",
        "derpp",
        "agem_r",
    ]
    assert [e.name for e in table_entries("perm-mnist", 200)] == domain
    assert [e.name for e in table_entries("rot-mnist", 5120, paper="der")] == domain
    assert [e.name for e in table_entries("mnist-360", 1000)] == [
        "joint",
        "sgd",
        "er",
        "der",
        "derpp",
        "mer",
        "agem_r",
    ]
    with pytest.raises(
        SettingError,
        match="the paper preset holds the rows the DER paper ran on it at buffer sizes 200, 500, 1000",
    ):
        table_entries("mnist-360", 5120)
    # another paper's rows on it: that paper's methods, as on any benchmark
    assert [e.name for e in table_entries("seq-mnist", 200, paper="x-der")] == list(xder_table_methods())


def test_a_benchmark_without_figures_takes_the_papers_methods_that_run_its_scenario() -> None:
    """The DER paper's Table 2 methods on the digits benchmarks: those that refuse the scenario
    (LwF and iCaRL in Domain-IL; every method that needs task boundaries on a general stream)
    are left out; named in --methods they refuse in one line when planned."""
    domain = [e.name for e in table_entries("perm-digits", 200, paper="der")]
    assert domain == [
        "joint",
        "sgd",
        "ewc_on",
        "si",
        "er",
        "gem",
        "agem",
        "fdr",
        "gss",
        "hal",
        "der",
        "derpp",
    ]
    assert [e.name for e in table_entries("digits-360", 200, paper="der")] == [
        "joint", "sgd", "er", "gss", "der", "derpp",
    ]  # fmt: skip
