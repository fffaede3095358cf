"""Published results beside ours: the two-standard-error rule against values worked out by hand,
which groups a published cell matches, and the published column of reports."""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import math

import pytest

from xder_eval import (
    PublishedResult,
    RunRecord,
    build_report,
    compare_to_published,
    preset_entry_name,
    report_csv,
    report_dict,
    report_markdown,
)

# Ours on seq-a, as tests/eval/test_report.py builds them: ER at buffer 200, seeds 0-2 (FAA 60/70/80,
# FF 10/20/30); FT (sgd, no buffer), seeds 0-1 (FAA 30/32, FF 100/95); DER++ at 500, seed 0 (60, 40).
ER = {
    0: [[60.0], [55.0, 70.0], [50.0, 60.0, 70.0]],
    1: [[80.0], [70.0, 90.0], [60.0, 70.0, 80.0]],
    2: [[100.0], [90.0, 100.0], [60.0, 80.0, 100.0]],
}
SGD = {0: [[100.0], [0.0, 100.0], [0.0, 0.0, 90.0]], 1: [[90.0], [0.0, 100.0], [0.0, 0.0, 96.0]]}
DERPP = [[90.0], [50.0, 90.0], [40.0, 60.0, 80.0]]
TIL = [[60.0, 50.0, 50.0], [70.0, 80.0, 50.0], [70.0, 80.0, 90.0]]


def record(
    method: str, seed: int, cil: list[list[float]], *, buffer: int = 200, preset: str = "none"
) -> RunRecord:
    """A complete run as ``xder-run train`` leaves it (config sections and results.json)."""
    config = {
        "run": {"method": method, "benchmark": "seq-a", "seed": seed, "preset": preset},
        "train": {"epochs": 1},
        "method": {"buffer_size": buffer} if buffer else {},
    }
    results = {
        "method": method,
        "benchmark": "seq-a",
        "seed": seed,
        "buffer_size": buffer,
        "complete": True,
        "n_tasks": 3,
        "accuracy_matrix": cil,
        "task_il_accuracy_matrix": TIL,
    }
    return RunRecord(f"runs/{method}-m{buffer}-s{seed}", config, results)


def table_records() -> list[RunRecord]:
    return [
        *(record("er", s, ER[s]) for s in (0, 1, 2)),
        *(record("sgd", s, SGD[s], buffer=0) for s in (0, 1)),
        record("derpp", 0, DERPP, buffer=500),
    ]


# ---------------------------------------------------------------------------------------------
# The rule


def test_our_std_when_the_paper_gives_none() -> None:
    # Ours 60, 70, 80: mean 70, sample std 10, n 3. SE = 10 / sqrt(3) = 5.7735; 2 SE = 11.547.
    within = compare_to_published([60.0, 70.0, 80.0], 80.0)
    assert (within.mean, within.std, within.n) == (pytest.approx(70.0), pytest.approx(10.0), 3)
    assert within.difference == pytest.approx(-10.0)
    assert (within.sigma, within.sigma_from) == (pytest.approx(10.0), "ours")
    assert within.standard_error == pytest.approx(5.773503, abs=1e-6)
    assert within.exceeds_two_se is False  # |-10| < 11.547
    beyond = compare_to_published([60.0, 70.0, 80.0], 58.0)
    assert beyond.difference == pytest.approx(12.0)
    assert beyond.exceeds_two_se is True  # 12 > 11.547


def test_the_published_std_and_run_count_where_given() -> None:
    # sigma = 3 (published), SE = 3 * sqrt(1/3 + 1/10) = 3 * sqrt(13/30) = 1.974842; 2 SE = 3.9497.
    beyond = compare_to_published([60.0, 70.0, 80.0], 75.0, published_std=3.0, published_seeds=10)
    assert (beyond.sigma, beyond.sigma_from) == (3.0, "published")
    assert beyond.standard_error == pytest.approx(1.974842, abs=1e-6)
    assert beyond.difference == pytest.approx(-5.0)
    assert beyond.exceeds_two_se is True  # 5 > 3.9497, though our own std (10) would call it noise
    within = compare_to_published([60.0, 70.0, 80.0], 73.5, published_std=3.0, published_seeds=10)
    assert within.exceeds_two_se is False  # 3.5 < 3.9497
    # No run count stated: the published value is taken as exact, SE = 3 / sqrt(3) = 1.732051.
    exact = compare_to_published([60.0, 70.0, 80.0], 73.5, published_std=3.0)
    assert exact.standard_error == pytest.approx(1.732051, abs=1e-6)
    assert exact.exceeds_two_se is True  # 3.5 > 3.4641: stricter than with 10 runs


def test_one_seed_needs_a_published_std_and_equality_is_within() -> None:
    alone = compare_to_published([60.0], 50.0)
    assert (alone.difference, alone.std, alone.sigma, alone.sigma_from) == (10.0, None, None, None)
    assert (alone.standard_error, alone.exceeds_two_se) == (None, None)
    # One seed, published std 2, no run count: SE = 2, 2 SE = 4, and |d| = 4 is not beyond it.
    edge = compare_to_published([5.0], 1.0, published_std=2.0)
    assert (edge.standard_error, edge.difference, edge.exceeds_two_se) == (2.0, 4.0, False)
    assert compare_to_published([5.0], 0.5, published_std=2.0).exceeds_two_se is True
    nothing = compare_to_published([math.nan], 50.0, published_std=2.0)
    assert (nothing.mean, nothing.n, nothing.difference, nothing.exceeds_two_se) == (None, 0, None, None)
    with pytest.raises(ValueError, match="std"):
        compare_to_published([1.0], 1.0, published_std=-1.0)
    with pytest.raises(ValueError, match="run count"):
        compare_to_published([1.0], 1.0, published_seeds=0)


# ---------------------------------------------------------------------------------------------
# Matching


def test_a_cell_matches_its_benchmark_buffer_and_entry() -> None:
    rpc = PublishedResult("seq-a", 500, "xder-rpc", "xder", faa=48.53, ff=26.94)
    assert preset_entry_name("xder", "paper:xder-rpc") == "xder-rpc"
    assert preset_entry_name("xder", "paper") == "xder"
    assert rpc.matches("seq-a", 500, "xder", "paper:xder-rpc")
    assert not rpc.matches("seq-a", 500, "xder", "paper")  # X-DER itself, not the variant
    assert not rpc.matches("seq-a", 2000, "xder", "paper:xder-rpc")
    assert not rpc.matches("seq-a (laptop)", 500, "xder", "paper:xder-rpc")  # another protocol
    ft = PublishedResult("seq-a", None, "sgd", "sgd", faa=9.43, ff=89.82)
    assert ft.matches("seq-a", 0, "sgd", "none")
    assert ft.matches("seq-a", 0, "sgd", "paper")
    assert not ft.matches("seq-a", 200, "sgd", "none")


# ---------------------------------------------------------------------------------------------
# Reports


PUBLISHED = (
    PublishedResult("seq-a", 200, "er", "er", faa=72.0, ff=18.0, source="Paper A, Table 1", row="ER"),
    PublishedResult(
        "seq-a", None, "sgd", "sgd", faa=30.0, faa_std=1.5, seeds=10, source="Paper B, Table 2", row="FT"
    ),
    PublishedResult("seq-a", 500, "xder", "xder", faa=50.0, source="Paper A, Table 1"),  # no such runs
    PublishedResult("seq-b", 500, "derpp", "derpp", faa=50.0, source="Paper C"),  # another benchmark
)


def test_the_report_shows_the_published_value_beside_matching_groups() -> None:
    report = build_report(table_records(), PUBLISHED)
    assert {k.method: p.row for k, p in report.published.items()} == {"sgd": "FT", "er": "ER"}
    table = report_markdown(report)
    sgd = "31.00 ± 1.41 (97.50 ± 3.54) n=2; published 30.00 ± 1.50 (-)"
    assert f"| sgd | none | {sgd} | {sgd} |\n" in table  # buffer-less: every column
    assert "| er | none | 70.00 ± 10.00 (20.00 ± 10.00) n=3; published 72.00 (18.00) |  |\n" in table
    assert "| derpp | none |  | 60.00 (40.00) n=1 |\n" in table  # DER++ at 500 of seq-a: none published
    assert "\nPublished (the paper protocol, Class-IL): Paper B, Table 2; Paper A, Table 1.\n" in table
    assert "published" not in report_markdown(report, task_il=True)  # the papers' figures are Class-IL

    rows = {r["method"]: r for r in csv.DictReader(io.StringIO(report_csv(report)))}
    assert (rows["er"]["published_faa"], rows["er"]["published_ff"]) == ("72.0000", "18.0000")
    assert (rows["er"]["published_faa_std"], rows["er"]["published_seeds"]) == ("", "")
    assert rows["er"]["published_source"] == "Paper A, Table 1"
    assert (rows["sgd"]["published_faa_std"], rows["sgd"]["published_seeds"]) == ("1.5000", "10")
    assert rows["derpp"]["published_faa"] == ""

    payload = report_dict(report)
    json.dumps(payload, allow_nan=False)
    by_method = {g["method"]: g["published"] for g in payload["groups"]}
    assert by_method["derpp"] is None
    assert by_method["er"] == {
        "entry": "er",
        "row": "ER",
        "faa": 72.0,
        "faa_std": None,
        "ff": 18.0,
        "ff_std": None,
        "task_il": None,
        "task_il_std": None,
        "seeds": None,
        "source": "Paper A, Table 1",
    }


def test_the_task_il_view_shows_a_published_task_il_figure_where_the_paper_prints_one() -> None:
    """The DER paper prints a Task-IL FAA beside the Class-IL one: the Task-IL view shows it (an
    FAA, no FF) where an entry has one, and nothing where it has none (ER here)."""
    with_task_il = (dataclasses.replace(PUBLISHED[1], task_il=61.02, task_il_std=3.33), *PUBLISHED[2:])
    report = build_report(table_records(), (PUBLISHED[0], *with_task_il))
    table = report_markdown(report, task_il=True)
    sgd = report.cell(next(r for r in report.rows if r.method == "sgd"), report.columns[0])
    assert sgd is not None
    ours = f"{sgd.task_il.faa.mean:.2f} ± {sgd.task_il.faa.std:.2f}"
    assert f"| sgd | none | {ours} (" in table
    assert "n=2; published 61.02 ± 3.33 |" in table
    assert "n=3; published" not in table  # ER's entry has no Task-IL figure
    assert "\nPublished (the paper protocol, Task-IL FAA): Paper B, Table 2.\n" in table
    assert report_dict(report)["groups"][0]["published"] is not None


def test_runs_on_another_protocol_or_of_a_variant_match_only_their_own_cell() -> None:
    laptop = record("er", 0, ER[0])
    laptop.config["run"]["protocol"] = "laptop"
    rpc = record("xder", 0, ER[1], buffer=500, preset="paper:xder-rpc")
    xder = record("xder", 1, ER[2], buffer=500, preset="paper")
    records: list[RunRecord] = [laptop, rpc, xder, record("sgd", 0, SGD[0], buffer=0)]
    report = build_report(records, PUBLISHED)
    assert {(k.benchmark, k.method, k.preset) for k in report.published} == {
        ("seq-a", "xder", "paper"),
        ("seq-a", "sgd", "none"),
    }
    table = report_markdown(report)
    assert [c.header for c in report.columns] == ["seq-a m500", "seq-a (laptop) m200"]
    assert "| er | none |  | 60.00 (10.00) n=1 |\n" in table  # on the laptop protocol: none published
    assert "| xder | paper | 80.00 (30.00) n=1; published 50.00 (-) |  |\n" in table
    assert "| xder | paper:xder-rpc | 70.00 (20.00) n=1 |  |\n" in table  # the variant has no cell here
