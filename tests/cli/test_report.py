"""xder-run report over tiny real runs (2 methods x 2 seeds, 1 epoch, width 4) and hand-made run
directories (broken ones, the papers' settings, analysed ones): the files written, the printed
table, the published values and the papers' analyses beside ours. write_report's own errors are
tested in tests/runs/test_report.py."""

from __future__ import annotations

import csv
import io
import json
import statistics
from pathlib import Path

import pytest

from xder_cli.main import main
from xder_cli.runs import rundir
from xder_cli.runs.report import find_run_dirs, read_run
from xder_cli.runs.settings import build_plan, resolve_config

TINY = ["--epochs", "1", "--set", "backbone.width=4", "--device", "cpu"]
PNG = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """runs/: er and sgd, seeds 0 and 1, complete; plus an er seed-2 run stopped after task 2."""
    out = tmp_path_factory.mktemp("runs")
    for method in ("er", "sgd"):
        for seed in ("0", "1"):
            assert main(["train", "--method", method, "--seed", seed, "--out", str(out), *TINY]) == 0
    (source,) = out.glob("*-er-seq-digits-m200-s0")
    stopped = out / "20000101-000000-er-seq-digits-m200-s2"
    stopped.mkdir()
    config = (source / "config.toml").read_text()
    assert "seed = 0\n" in config
    (stopped / "config.toml").write_text(config.replace("seed = 0\n", "seed = 2\n"))
    results = json.loads((source / "results.json").read_text())
    results |= {
        "seed": 2,
        "complete": False,
        "tasks_done": 2,
        "accuracy_matrix": results["accuracy_matrix"][:2],
        "task_il_accuracy_matrix": results["task_il_accuracy_matrix"][:2],
    }
    (stopped / "results.json").write_text(json.dumps(results))
    return out


def results_of(runs: Path, method: str) -> list[dict]:
    return [
        json.loads((run / "results.json").read_text())
        for run in sorted(runs.glob(f"*-{method}-seq-digits-m*-s[01]"))
    ]


def expected_cell(results: list[dict], prefix: str = "") -> str:
    faa = [r[f"{prefix}faa"] for r in results]
    ff = [r[f"{prefix}ff"] for r in results]
    return (
        f"{statistics.mean(faa):.2f} ± {statistics.stdev(faa):.2f} "
        f"({statistics.mean(ff):.2f} ± {statistics.stdev(ff):.2f}) n={len(results)}"
    )


def test_report_of_a_runs_folder(runs: Path, tmp_path: Path, capsys, saved_figures) -> None:
    out = tmp_path / "report"
    capsys.readouterr()
    assert main(["report", str(runs), "--out", str(out)]) == 0
    printed = capsys.readouterr().out

    assert {p.name for p in out.iterdir()} == {
        "table.md",
        "table.csv",
        "report.json",
        "curves_seq-digits_m200.png",
        "matrix_seq-digits_m200_er.png",
        "matrix_seq-digits_m0_sgd.png",
    }
    for png in out.glob("*.png"):
        assert png.read_bytes().startswith(PNG)

    table = (out / "table.md").read_text()
    assert table in printed  # the table and the list of problems are printed too
    er_cell = expected_cell(results_of(runs, "er"))
    sgd_cell = expected_cell(results_of(runs, "sgd"))
    assert "| method | preset | seq-digits m200 |" in table
    assert f"| sgd | none | {sgd_cell} |" in table
    assert f"| er | none | {er_cell} |" in table
    stopped = runs / "20000101-000000-er-seq-digits-m200-s2"
    assert f"- {stopped}: incomplete, 2 of 5 tasks done (er on seq-digits m200 seed 2)" in table
    assert "- sgd [none] on seq-digits: seed 2 missing (complete: 0, 1)" in table
    assert "- er [none] on seq-digits m200: seed 2 missing (complete: 0, 1)" in table
    assert "5 runs read, 2 groups" in printed
    # TINY's --epochs and --set: named, since the table is not the protocol's own
    assert table.startswith("**2 of the groups below were trained with overrides** (named after the table)")
    assert "Trained with settings their preset and protocol do not give" in table
    assert "- er (none) on seq-digits, buffer 200: `train.epochs=1, backbone.width=4`" in table
    assert "- sgd (none) on seq-digits, no buffer: `train.epochs=1, backbone.width=4`" in table
    matrix = saved_figures["matrix_seq-digits_m200_er.png"]
    assert matrix._suptitle.get_text() == "with overrides: train.epochs=1, backbone.width=4"
    assert (
        saved_figures["curves_seq-digits_m200.png"]._suptitle.get_text()
        == "some rows with overrides (see table.md)"
    )

    rows = list(csv.DictReader(io.StringIO((out / "table.csv").read_text())))
    assert [(r["benchmark"], r["buffer"], r["method"], r["n"], r["seeds"]) for r in rows] == [
        ("seq-digits", "0", "sgd", "2", "0;1"),
        ("seq-digits", "200", "er", "2", "0;1"),
    ]
    er_faa = [r["faa"] for r in results_of(runs, "er")]
    assert float(rows[1]["faa_mean"]) == pytest.approx(statistics.mean(er_faa), abs=1e-4)
    assert float(rows[1]["faa_std"]) == pytest.approx(statistics.stdev(er_faa), abs=1e-4)
    assert rows[1]["missing_seeds"] == "2"

    payload = json.loads((out / "report.json").read_text())
    assert payload["setting"] == "scenario"
    assert [(o["method"], o["overrides"]) for o in payload["overrides"]] == [
        ("sgd", {"train.epochs": 1, "backbone.width": 4}),
        ("er", {"train.epochs": 1, "backbone.width": 4}),
    ]
    assert "matrix_seq-digits_m0_sgd.png" in payload["files"]
    (incomplete,) = [p for p in payload["problems"] if p["kind"] == "incomplete"]
    assert (incomplete["tasks_done"], incomplete["n_tasks"], incomplete["seed"]) == (2, 5, 2)
    sgd = next(g for g in payload["groups"] if g["method"] == "sgd")
    sgd_results = results_of(runs, "sgd")
    assert sgd["class_il"]["faa"]["values"] == pytest.approx([r["faa"] for r in sgd_results])
    assert sgd["task_il"]["ff"]["values"] == pytest.approx([r["task_il_ff"] for r in sgd_results])
    assert sgd["class_il"]["curve_mean"] == pytest.approx(
        [statistics.mean(v) for v in zip(*(r["average_accuracy"] for r in sgd_results), strict=True)]
    )


def test_report_of_named_run_dirs_in_task_il(runs: Path, tmp_path: Path, capsys) -> None:
    named = sorted(str(p) for p in runs.glob("*-s[01]"))
    out = tmp_path / "til"
    argv = ["report", *named, named[0], "--out", str(out), "--task-il"]  # a run named twice
    assert main(argv) == 0
    table = capsys.readouterr().out
    assert table.split("\n\n", 1)[1].startswith("Task-IL final average accuracy")  # after the overrides line
    assert f"| er | none | {expected_cell(results_of(runs, 'er'), 'task_il_')} |" in table
    assert "Missing or incomplete" not in table  # only seeds 0 and 1 were named
    assert json.loads((out / "report.json").read_text())["setting"] == "task-il"


def test_broken_run_directories_are_listed(tmp_path: Path, capsys) -> None:
    config = '[run]\nmethod = "er"\nbenchmark = "seq-digits"\nseed = 0\n\n[method]\nbuffer_size = 200\n'
    fresh = tmp_path / "runs" / "fresh"  # died before its first task
    fresh.mkdir(parents=True)
    (fresh / "config.toml").write_text(config)
    garbled = tmp_path / "runs" / "garbled"
    garbled.mkdir()
    (garbled / "config.toml").write_text(config.replace("seed = 0", "seed = 1"))
    (garbled / "results.json").write_text('{"method": "er", ')
    (tmp_path / "runs" / "notes").mkdir()  # not a run directory: skipped by the scan

    assert [p.name for p in find_run_dirs([str(tmp_path / "runs")])] == ["fresh", "garbled"]
    assert read_run(fresh).results is None
    assert read_run(garbled).error.startswith("unreadable results.json: Expecting")

    # With no complete run at all: one line, exit status 2, nothing written.
    out = tmp_path / "out"
    assert main(["report", str(tmp_path / "runs"), "--out", str(out)]) == 2
    assert capsys.readouterr().err == (
        "xder-run report: error: no complete run to report among the 2 run directories read (1 without "
        "results.json, 1 unreadable): nothing written; finish them first (xder-run train --resume "
        "RUN_DIR continues one)\n"
    )
    assert not out.exists()
    # Beside a complete run, they are listed.
    _paper_run(tmp_path / "runs", "done", "er", "seq-digits", 2, [[90.0], [40.0, 95.0]], buffer_size=200)
    assert main(["report", str(tmp_path / "runs"), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert f"- {fresh}: no results.json, no task finished (er on seq-digits m200 seed 0)" in printed
    assert f"- {garbled}: unreadable results.json: Expecting" in printed
    kinds = [p["kind"] for p in json.loads((out / "report.json").read_text())["problems"]]
    assert kinds[:2] == ["missing", "unreadable"]


def _paper_run(root: Path, name: str, method: str, benchmark: str, seed: int, matrix: list, **kw) -> None:
    """A complete run directory in the real format, configured as xder-run train would."""
    config = build_plan(
        resolve_config(
            method,
            benchmark,
            protocol=kw.get("protocol", "paper"),
            preset=kw.get("preset"),
            settings={"run.seed": seed}
            | ({"method.buffer_size": kw["buffer_size"]} if "buffer_size" in kw else {})
            | kw.get("settings", {}),
        )
    ).config
    run_dir = root / name
    run_dir.mkdir(parents=True)
    rundir.write_config(run_dir / "config.toml", config)
    results = {"method": method, "benchmark": benchmark, "seed": seed, "complete": True, "n_tasks": 2}
    results |= {"buffer_size": kw.get("buffer_size", 0), "accuracy_matrix": matrix}
    rundir.write_json(run_dir / "results.json", results | {"task_il_accuracy_matrix": matrix})


def test_runs_placed_differently_are_one_group(tmp_path: Path, capsys) -> None:
    """Where a run trained and where its data lived (run.device, run.data_root, run.data_device)
    do not define it: one group over the seeds, not one per machine."""
    runs = tmp_path / "runs"
    _paper_run(runs, "a", "er", "seq-cifar10", 0, [[80.0], [30.0, 32.0]], buffer_size=200)
    placed = {"run.device": "cpu", "run.data_root": "/elsewhere", "run.data_device": "host"}
    _paper_run(runs, "b", "er", "seq-cifar10", 1, [[84.0], [32.0, 34.0]], buffer_size=200, settings=placed)
    out = tmp_path / "report"
    assert main(["report", str(runs), "--out", str(out)]) == 0
    table = capsys.readouterr().out
    assert "| er | paper | 32.00 ± 1.41 (51.00 ± 1.41) n=2; published" in table
    assert "data_device" not in table


def test_a_seed_run_twice_counts_once_and_the_command_says_which(tmp_path: Path, capsys) -> None:
    """Seeds [0, 0, 1] with FAA [95.4, 95.0, 93.0]: seed 0's earlier run (its folder name sorts
    first) counts, n = 2, mean (95.0 + 93.0) / 2 = 94.0, std sqrt(2); a note names both runs. DER++
    seed 0 run twice and nothing else: n = 1, no std."""
    runs = tmp_path / "runs"
    er = {"buffer_size": 200}
    _paper_run(runs, "20240102-000000-er-s0", "er", "seq-cifar10", 0, [[96.4], [95.4, 95.4]], **er)
    _paper_run(runs, "20240101-000000-er-s0", "er", "seq-cifar10", 0, [[96.0], [95.0, 95.0]], **er)
    _paper_run(runs, "20240101-000000-er-s1", "er", "seq-cifar10", 1, [[94.0], [93.0, 93.0]], **er)
    _paper_run(runs, "20240103-derpp-s0", "derpp", "seq-cifar10", 0, [[90.0], [80.0, 80.0]], **er)
    _paper_run(runs, "20240104-derpp-s0", "derpp", "seq-cifar10", 0, [[92.0], [82.0, 82.0]], **er)
    out = tmp_path / "report"
    assert main(["report", str(runs), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "| er | paper | 94.00 ± 1.41 (1.00 ± 0.00) n=2; published 44.79 ± 1.86 (-) |" in printed
    assert "| derpp | paper | 80.00 (10.00) n=1; published" in printed
    first, second = runs / "20240101-000000-er-s0", runs / "20240102-000000-er-s0"
    notes = [line for line in printed.splitlines() if line.startswith("note: ")]
    assert notes == [
        f"note: er [paper] on seq-cifar10 m200, seed 0: counted {first}, set aside {second} "
        "(one run per seed: the first by folder name)",
        f"note: derpp [paper] on seq-cifar10 m200, seed 0: counted {runs / '20240103-derpp-s0'}, set aside "
        f"{runs / '20240104-derpp-s0'} (one run per seed: the first by folder name)",
    ]
    table = (out / "table.md").read_text()
    assert f"seed 0 run 2 times, counted once: {first} counts, set aside {second}" in table
    lines = {r["method"]: r for r in csv.DictReader(io.StringIO((out / "table.csv").read_text()))}
    assert (lines["er"]["n"], lines["er"]["seeds"], lines["er"]["faa_mean"]) == ("2", "0;1", "94.0000")
    assert lines["er"]["runs"] == f"{first};{runs / '20240101-000000-er-s1'}"
    assert (lines["derpp"]["n"], lines["derpp"]["faa_std"]) == ("1", "")
    groups = {g["method"]: g for g in json.loads((out / "report.json").read_text())["groups"]}
    assert groups["er"]["repeated_seeds"] == [{"seed": 0, "counted": str(first), "set_aside": [str(second)]}]


def test_the_published_value_stands_beside_matching_groups(tmp_path: Path, capsys) -> None:
    runs = tmp_path / "runs"
    # DER++ on seq-cifar100 at 500, seeds 0-1: FAA (30+32)/2 = 31 and 33, FF 80-30 = 50 and 52.
    _paper_run(runs, "derpp-0", "derpp", "seq-cifar100", 0, [[80.0], [30.0, 32.0]], buffer_size=500)
    _paper_run(runs, "derpp-1", "derpp", "seq-cifar100", 1, [[84.0], [32.0, 34.0]], buffer_size=500)
    # X-DER's RPC variant (its own published row) and FT (buffer-less: every column).
    rpc = {"buffer_size": 500, "preset": "paper:xder-rpc"}
    _paper_run(runs, "rpc-0", "xder", "seq-cifar100", 0, [[70.0], [50.0, 48.0]], **rpc)
    _paper_run(runs, "sgd-0", "sgd", "seq-cifar100", 0, [[90.0], [0.0, 20.0]])
    # DER++ on the laptop protocol of seq-cifar10: no published value beside it.
    laptop = {"buffer_size": 200, "protocol": "laptop"}
    _paper_run(runs, "laptop-0", "derpp", "seq-cifar10", 0, [[90.0], [40.0, 60.0]], **laptop)
    out = tmp_path / "report"
    assert main(["report", str(runs), "--out", str(out)]) == 0
    table = capsys.readouterr().out
    assert "| derpp | paper |  | 32.00 ± 1.41 (51.00 ± 1.41) n=2; published 38.25 (50.54) |" in table
    assert "| xder | paper:xder-rpc |  | 49.00 (20.00) n=1; published 48.53 (26.94) |" in table
    assert "| sgd | paper |  | 10.00 (90.00) n=1; published 9.43 (89.82) |" in table
    assert "| derpp | tuned | 50.00 (50.00) n=1 |  |" in table  # seq-cifar10 (laptop) m200
    assert "Published (the paper protocol, Class-IL): X-DER paper (Boschini et al." in table
    groups = {
        (g["benchmark"], g["method"]): g for g in json.loads((out / "report.json").read_text())["groups"]
    }
    assert groups["seq-cifar100", "xder"]["published"]["row"] == "X-DER w/ RPC future heads"
    assert groups["seq-cifar10 (laptop)", "derpp"]["published"] is None
    lines = {
        (r["benchmark"], r["method"]): r for r in csv.DictReader(io.StringIO((out / "table.csv").read_text()))
    }
    assert (
        lines["seq-cifar100", "derpp"]["published_faa"],
        lines["seq-cifar100", "derpp"]["published_ff"],
    ) == (
        "38.2500",
        "50.5400",
    )
    assert lines["seq-cifar10 (laptop)", "derpp"]["published_faa"] == ""


def _analysed(run_dir: Path, ss_err: float, ss_nll: float, ece: float, newest: float) -> None:
    """An analysis/analysis.json as xder-run analyze writes it (ece, ss, head_bias only)."""
    per_task = [{"task": 1, "mistakes": 10, "fraction_by_head": [1 - newest, newest]}]
    analyses = {
        "ece": {"ece": ece, "n_bins": 15, "accuracy": 0.2, "plot": "reliability.png"},
        "ss_err": ss_err,
        "ss_nll": ss_nll,
        "head_bias": {"per_task": per_task, "newest_head_share": newest, "plot": "head_bias.png"},
    }
    (run_dir / "analysis").mkdir()
    rundir.write_json(run_dir / "analysis" / "analysis.json", {"run": str(run_dir), "analyses": analyses})


def test_analysed_runs_add_the_papers_analyses_with_its_figures_and_claims(
    tmp_path: Path, capsys, saved_figures
) -> None:
    runs = tmp_path / "runs"
    laptop = {"buffer_size": 500, "protocol": "laptop", "preset": "tuned"}
    planted = {  # per seed: SS-ERR, SS-NLL, ECE and newest-head share as fractions
        "er": [(0.83, 3.0, 0.35, 0.75), (0.85, 3.2, 0.37, 0.77)],
        "derpp": [(0.84, 2.6, 0.30, 0.90), (0.86, 2.6, 0.32, 0.92)],
        "xder": [(0.80, 2.2, 0.05, 0.10), (0.82, 2.4, 0.07, 0.12)],
    }
    for method, seeds in planted.items():
        for seed, figures in enumerate(seeds):
            matrix = [[80.0], [30.0, 32.0]]
            _paper_run(runs, f"{method}-{seed}", method, "seq-cifar100", seed, matrix, **laptop)
            _analysed(runs / f"{method}-{seed}", *figures)
    _paper_run(runs, "sgd-0", "sgd", "seq-cifar100", 0, [[90.0], [0.0, 20.0]], protocol="laptop")
    _paper_run(runs, "sgd-1", "sgd", "seq-cifar100", 1, [[90.0], [0.0, 20.0]], protocol="laptop")
    out = tmp_path / "report"
    capsys.readouterr()
    assert main(["report", str(runs), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    text = (out / "analyses.md").read_text()
    assert text in printed
    # Means and sample stds by hand: X-DER SS-ERR (0.80, 0.82) -> 0.810 ± 0.014; ECE 5 and 7 % ->
    # 6.0 ± 1.4; newest head 10 and 12 % -> 11.0 ± 1.4. FT has no analysis: no row.
    assert "| method | SS-ERR | paper | SS-NLL | paper | ECE | newest-head share |" in text
    rows = [
        "| er | 0.840 ± 0.014 (n 2) | 0.710 | 3.10 ± 0.14 (n 2) | 4.00 | 36.0 ± 1.4 (n 2) "
        "| 76.0 ± 1.4 (n 2) |",
        "| derpp | 0.850 ± 0.014 (n 2) | 0.670 | 2.60 ± 0.00 (n 2) | 2.22 | 31.0 ± 1.4 (n 2) "
        "| 91.0 ± 1.4 (n 2) |",
        "| xder | 0.810 ± 0.014 (n 2) | 0.570 | 2.30 ± 0.14 (n 2) | 1.83 | 6.0 ± 1.4 (n 2) "
        "| 11.0 ± 1.4 (n 2) |",
    ]
    assert "\n".join(rows) in text
    assert "| sgd |" not in text
    # The paper orders ER > DER++ > X-DER on both; ours swap ER and DER++ on SS-ERR only.
    assert "The paper's orderings, in ours: 5 of 6 agree in direction." in text
    assert (
        "- SS-ERR: derpp below er in the paper (0.670 < 0.710); ours 0.850 against 0.840: **does not agree** "
        "(within 2 SE)\n" in text
    )
    assert "- SS-NLL: xder below er in the paper (1.83 < 4.00); ours 2.30 against 3.10: agrees\n" in text
    # Claims: X-DER's SS-ERR below ER's by 0.03 > 2 SE = 2 sqrt(0.0002/2 + 0.0002/2) = 0.028: holds.
    assert "### The paper's claims on its analyses, checked on these runs" in text
    assert (
        "- **holds**: X-DER has the lowest secondary super-class error (SS-ERR) of the methods evaluated "
        "(X-DER paper, Sec. 6, secondary information table). SS-ERR, xder below er? 0.810 (n 2) against "
        "0.840 (n 2): difference -0.030, 2 SE 0.028." in text
    )
    payload = json.loads((out / "report.json").read_text())
    (column,) = payload["analyses"]
    verdicts = {c["id"]: (c["verdict"], c["direction"]) for c in column["claims"]}
    assert verdicts == {
        "xder-lowest-ss-err": ("holds", "agrees"),
        "xder-lowest-ss-nll": ("holds", "agrees"),
        "er-highest-ss-nll": ("holds", "agrees"),
        "xder-lowest-ece": ("holds", "agrees"),
        "xder-less-newest-bias": ("holds", "agrees"),
    }
    rows = {r["name"]: r for r in column["rows"]}
    assert rows["xder"]["figures"]["ece"]["values"] == pytest.approx([5.0, 7.0])
    assert rows["xder"]["newest_head_curve"] == {"1": pytest.approx(11.0)}
    assert column["plot"] == "analyses_seq-cifar100-laptop_m500.png"
    assert (out / column["plot"]).read_bytes().startswith(PNG)
    assert {"analyses.md", column["plot"]} <= set(payload["files"])
    assert "(6 runs analysed): wrote table.md, table.csv, analyses.md, report.json and" in printed


def test_a_report_without_analysed_runs_has_no_analyses(tmp_path: Path, capsys) -> None:
    runs = tmp_path / "runs"
    _paper_run(runs, "er-0", "er", "seq-cifar100", 0, [[80.0], [30.0, 32.0]], buffer_size=500)
    (runs / "er-0" / "analysis").mkdir()
    (runs / "er-0" / "analysis" / "analysis.json").write_text("{not json")  # unreadable: left out
    out = tmp_path / "report"
    assert main(["report", str(runs), "--out", str(out)]) == 0
    assert not (out / "analyses.md").exists()
    assert json.loads((out / "report.json").read_text())["analyses"] == []
    printed = capsys.readouterr().out
    assert "## Analyses" not in printed
    assert "runs analysed" not in printed


def test_a_buffer_0_run_has_its_own_column(tmp_path: Path, capsys) -> None:
    # The first hour's case: X-DER at --buffer-size 0 and at the default 200, then report: two
    # columns, each run in its own (a replay method at buffer 0 is not a buffer-less method).
    runs, out = tmp_path / "r0", tmp_path / "report"
    assert main(["train", "--buffer-size", "0", "--out", str(runs), *TINY]) == 0
    assert main(["train", "--out", str(runs), *TINY]) == 0
    faa = {
        json.loads((run / "results.json").read_text())["buffer_size"]: json.loads(
            (run / "results.json").read_text()
        )["faa"]
        for run in runs.iterdir()
    }
    capsys.readouterr()
    assert main(["report", str(runs), "--out", str(out)]) == 0
    table = (out / "table.md").read_text()
    header = next(line for line in table.splitlines() if line.startswith("| method"))
    assert header.split("|")[3:5] == [" seq-digits m0 ", " seq-digits m200 "]
    # Buffer 0 has no tuned preset entry, so that run is xder [none], the other xder [tuned].
    rows = {
        line.split("|")[2].strip(): line.split("|")[3:5]
        for line in table.splitlines()
        if line.startswith("| xder ")
    }
    assert rows["none"][0].strip().startswith(f"{faa[0]:.2f}")
    assert rows["none"][1].strip() == ""
    assert rows["tuned"][1].strip().startswith(f"{faa[200]:.2f}")
    assert rows["tuned"][0].strip() == ""
    assert {p.name for p in out.glob("curves_*.png")} == {
        "curves_seq-digits_m0.png",
        "curves_seq-digits_m200.png",
    }
