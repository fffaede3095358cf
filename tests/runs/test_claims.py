"""The papers' claims shipped as data (papers/claims.toml): every entry they name is a row of the
published tables they are about, and each claim holds on the paper's own figures."""

from __future__ import annotations

import operator

import pytest
import torch

from xder_cli.runs.claims import TABLE_METRICS, _parse, claim_line, claims, direction, on_table, table_claims
from xder_cli.runs.published import published_analyses, published_buffer_sizes, published_table
from xder_eval import ANALYSIS_METRICS, Claim, check_claim

COMPARE = {">": operator.gt, "<": operator.lt, ">=": operator.ge, "<=": operator.le}
UNTRANSCRIBED = {"perm-digits": "domain-il", "rot-digits": "domain-il", "digits-360": "general"}
"""The benchmarks the DER paper's claims are checked on with no paper figures (built from the
digits as its P-MNIST, R-MNIST and MNIST-360 are from MNIST), and each one's scenario."""


def test_the_shipped_claims_name_rows_of_their_tables_and_hold_on_the_papers_figures() -> None:
    checked = 0
    for claim in claims():
        if claim.metric not in TABLE_METRICS:
            continue  # the analyses' claims: the next test
        for benchmark in claim.benchmarks:
            if benchmark in UNTRANSCRIBED:
                continue  # no paper figures to hold it on: the next test
            sizes = claim.buffer_sizes or published_buffer_sizes(benchmark)
            assert sizes, (claim.id, benchmark)
            named = set()
            for size in sizes:
                table = {p.entry: p for p in published_table(benchmark, size)}
                named |= set(table)
                mine_here = on_table(claim, table)
                assert mine_here is not None, (claim.id, benchmark, size)  # about every column
                for row in mine_here.rows:
                    for other in mine_here.than:
                        mine, theirs = getattr(table[row], claim.metric), getattr(table[other], claim.metric)
                        if mine is None or theirs is None:  # GDumb and JT have no FF
                            continue
                        assert COMPARE[claim.relation](mine, theirs), (claim.id, benchmark, size, row, other)
                        checked += 1
            assert {*claim.rows, *claim.than} <= named, (claim.id, benchmark)  # no misspelt entry
    # The X-DER paper: 5 columns (CIFAR-100 500, 2000; miniImageNet 2000, 5000; NTU-60 500) x 48
    # pairs (9 + 1 + 2 + 4 + 16 + 16); the DER paper: 13 pairs at 200 and 500, 11 at 5120 (no iCaRL),
    # plus its regularisers at FT's level (3 pairs in each of the 3 columns) and DER++ above the
    # 8 other baselines (at 200 and 500).
    assert checked == 5 * 48 + 13 + 13 + 11 + 3 * 3 + 2 * 8


def test_the_claims_without_paper_figures_name_methods_that_run_their_scenario() -> None:
    """The digits benchmarks' claims: every benchmark is what the claim says (its scenario), and
    every method named builds in that scenario (no claim about a method that refuses it)."""
    from tests.methods.conftest import TinyNet, to_float

    from xder_data import benchmark_scenario
    from xder_methods import (
        ContinualSetting,
        MethodConfigError,
        Transforms,
        create_method,
        method_config_class,
    )

    ids = []
    for claim in claims():
        for benchmark in set(claim.benchmarks) & set(UNTRANSCRIBED):
            ids.append(claim.id)
            scenario = UNTRANSCRIBED[benchmark]
            assert benchmark_scenario(benchmark) == scenario
            classes = (10,) * 20 if scenario == "domain-il" else (9,)
            setting = ContinualSetting(classes, (1, 2, 2), scenario=scenario)  # type: ignore[arg-type]
            for name in {*claim.rows, *claim.than}:
                try:
                    create_method(
                        name,
                        net=TinyNet(setting.num_classes),
                        setting=setting,
                        transforms=Transforms(to_float, to_float, to_float),
                        config=method_config_class(name)(),
                        generator=torch.Generator(),
                    )
                except MethodConfigError as error:
                    pytest.fail(f"{claim.id} names {name}, which refuses {benchmark}: {error}")
    assert sorted(set(ids)) == sorted([
        "derpp-above-er-domain-il", "rehearsal-above-regularisers-domain-il", "ft-lowest-domain-il",
        "jt-highest-domain-il", "der-above-er-gcl", "rehearsal-above-sgd-gcl", "jt-highest-gcl",
    ])  # fmt: skip


def test_the_analysis_claims_name_rows_of_the_papers_tables_and_hold_on_its_figures() -> None:
    """Each claim on an analysis figure is about Split CIFAR-100 (the only benchmark with
    super-classes), names rows of its Table 1 and, where the paper prints the figure (SS-ERR,
    SS-NLL: published_analyses.toml), holds on those numbers in every column."""
    mine = [c for c in claims() if c.metric not in TABLE_METRICS]
    assert [c.id for c in mine] == [
        "xder-lowest-ss-err",
        "xder-lowest-ss-nll",
        "er-highest-ss-nll",
        "xder-lowest-ece",
        "xder-less-newest-bias",
    ]
    figures = published_analyses()
    assert {(p.benchmark, p.buffer_size) for p in figures} == {("seq-cifar100", 500), ("seq-cifar100", 2000)}
    checked = 0
    for claim in mine:
        assert claim.metric in ANALYSIS_METRICS
        assert claim.benchmarks == ("seq-cifar100",)
        for size in (500, 2000):
            table = {p.entry for p in published_table("seq-cifar100", size)}
            assert {*claim.rows, *claim.than} <= table, claim.id
            column = {p.entry: p.values.get(claim.metric) for p in figures if p.buffer_size == size}
            if claim.metric in ("ece", "newest_head_share"):  # figures without numbers
                assert all(v is None for v in column.values())
                continue
            for row in claim.rows:
                for other in claim.than:
                    assert COMPARE[claim.relation](column[row], column[other]), (claim.id, size, row, other)
                    checked += 1
    assert checked == 2 * (7 + 7 + 7)
    # every published analysis row is a row of published.toml, with the same method
    for p in figures:
        row = next(r for r in published_table(p.benchmark, p.buffer_size) if r.entry == p.entry)
        assert (row.method, row.row) == (p.method, p.row)


def test_the_direction_of_the_means_is_read_whatever_the_noise() -> None:
    below = Claim("c", "t", "s", "ss_err", ("xder",), "<", ("er", "derpp"))
    # one seed each: no standard error, so not checked; the means still go the claim's way
    one_seed = check_claim(below, {"xder": [0.80], "er": [0.84], "derpp": [0.85]})
    assert (one_seed.verdict, direction(one_seed)) == ("not checked", "agrees")
    against = check_claim(below, {"xder": [0.80], "er": [0.84], "derpp": [0.79]})
    assert direction(against) == "against"
    assert direction(check_claim(below, {"xder": [0.8]})) is None  # no pair with two means
    at_most = Claim("c", "t", "s", "faa", ("xder-ce",), "<=", ("xder",))
    assert direction(check_claim(at_most, {"xder-ce": [40.0], "xder": [40.0]})) == "agrees"
    assert direction(check_claim(at_most, {"xder-ce": [40.5], "xder": [40.0]})) == "against"


def test_the_claims_asked_for_are_there() -> None:
    ids = [c.id for c in table_claims("seq-cifar100", 500)]
    assert ids == [
        "xder-highest-faa",
        "xder-above-derpp",
        "xder-forgets-less",
        "xder-ablations",
        "ft-lowest",
        "jt-highest",
    ]
    ablations = next(c for c in claims() if c.id == "xder-ablations")
    assert (ablations.relation, ablations.than, len(ablations.rows)) == ("<=", ("xder",), 4)
    assert [c.id for c in table_claims("seq-cifar10", 200)] == [
        "derpp-at-least-der",
        "der-above-er",
        "ft-lowest",
        "jt-highest",
        "regularisers-at-ft",
        "derpp-above-baselines",
    ]
    assert table_claims("seq-digits", 200) == []
    # the DER paper's Seq-CIFAR-10 has no iCaRL at buffer 5120: the claims there leave it out
    ft = on_table(table_claims("seq-cifar10", 5120)[2], ["joint", "sgd", "er", "der", "derpp"])
    assert (ft.rows, ft.than) == (("sgd",), ("joint", "er", "der", "derpp"))
    assert on_table(ft, ["sgd"]) is None  # nothing left to compare


GOOD = {
    "id": "a",
    "text": "t",
    "section": "s",
    "benchmarks": ["seq-cifar100"],
    "metric": "faa",
    "rows": ["xder"],
    "relation": ">",
    "than": ["derpp"],
}


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"metric": "acc"}, "metric must be one of ece, faa, ff, newest_head_share, ss_err, ss_nll"),
        ({"relation": "!="}, "relation must be one of"),
        ({"rows": []}, "rows must be a non-empty list"),
        ({"than": "derpp"}, "than must be a non-empty list"),
        ({"buffer_sizes": [500, True]}, "buffer_sizes must be a list of integers"),
        ({"colour": "red"}, "claim 1 \\(a\\) needs"),
        ({"text": None}, "needs text"),
    ],
)
def test_a_malformed_claims_file_is_refused(change: dict, message: str) -> None:
    raw = {k: v for k, v in (GOOD | change).items() if v is not None}
    with pytest.raises(ValueError, match=message):
        _parse({"claim": [raw]})
    with pytest.raises(ValueError, match="only \\[\\[claim\\]\\] tables"):
        _parse({"claim": [GOOD], "extra": {}})
    assert _parse({"claim": [GOOD]})[0].rows == ("xder",)


def test_a_claim_line_reads_with_its_numbers() -> None:
    record = {
        "verdict": "not separated",
        "text": "X-DER's FAA is above DER++'s",
        "section": "Sec. 5.3",
        "metric": "faa",
        "relation": ">",
        "deciding": {"row": "xder", "other": "derpp", "mean": 40.0, "other_mean": 39.0, "n": 3, "other_n": 3,
                     "difference": 1.0, "standard_error": 1.25},
        "missing": ["lucir"],
    }  # fmt: skip
    assert claim_line(record) == (
        "- **not separated**: X-DER's FAA is above DER++'s (Sec. 5.3). FAA, xder above derpp? 40.00 (n 3) "
        "against 39.00 (n 3): difference +1.00, 2 SE 2.50. Not in this table: lucir."
    )
    record["deciding"] |= {"standard_error": None, "n": 1}
    record["missing"] = []
    assert claim_line(record).endswith("difference +1.00, standard error undefined (one seed).")
    record |= {"verdict": "not checked", "direction": "agrees", "metric": "ss_err"}
    record["deciding"] |= {"mean": 0.81, "other_mean": 0.8425, "difference": -0.0325}
    assert claim_line(record).endswith(
        "SS-ERR, xder above derpp? 0.810 (n 1) against 0.843 (n 3): difference -0.033, standard error "
        "undefined (one seed). The means go the claim's way in every pair."
    )
