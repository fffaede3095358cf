"""The papers' claims shipped as data (presets/claims.toml): every entry they name is a row of the
published tables they are about, and each claim holds on the paper's own figures."""

from __future__ import annotations

import operator

import pytest

from xder_cli.runs.claims import _parse, claim_line, claims, on_table, table_claims
from xder_cli.runs.published import published_buffer_sizes, published_table

COMPARE = {">": operator.gt, "<": operator.lt, ">=": operator.ge, "<=": operator.le}


def test_the_shipped_claims_name_rows_of_their_tables_and_hold_on_the_papers_figures() -> None:
    checked = 0
    for claim in claims():
        for benchmark in claim.benchmarks:
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
    # pairs (9 + 1 + 2 + 4 + 16 + 16); the DER paper: 13 pairs at 200 and 500, 11 at 5120 (no iCaRL).
    assert checked == 5 * 48 + 13 + 13 + 11


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
        ({"metric": "acc"}, "metric must be faa or ff"),
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
