"""Claims checked on our rows: the two-standard-error rule on differences of means, by hand."""

from __future__ import annotations

import math

import pytest

from xder_eval import (
    DOES_NOT_HOLD,
    HOLDS,
    NOT_CHECKED,
    NOT_SEPARATED,
    Claim,
    PairRecord,
    PairVerdict,
    check_claim,
    compare_rows,
)


def claim(relation: str, rows=("xder",), than=("derpp",)) -> Claim:
    return Claim("c", "text", "Sec. 5", "faa", tuple(rows), relation, tuple(than), ("seq-cifar100",))


def test_compare_rows_by_hand() -> None:
    # 50, 52, 54: mean 52, s^2 4; 38, 40, 42: mean 40, s^2 4. SE = sqrt(4/3 + 4/3).
    difference, se = compare_rows([50, 52, 54], [38, 40, 42])
    assert difference == pytest.approx(12.0)
    assert se == pytest.approx(math.sqrt(8 / 3))  # 1.633
    # Unequal sizes: 1, 3 (mean 2, s^2 2, n 2) against 10, 10, 13 (mean 11, s^2 3, n 3).
    difference, se = compare_rows([1, 3], [10, 10, 13])
    assert difference == pytest.approx(-9.0)
    assert se == pytest.approx(math.sqrt(2 / 2 + 3 / 3))
    # Non-finite values are left out; one value leaves the SE undefined.
    assert compare_rows([5.0, float("nan")], [1.0, 2.0]) == (pytest.approx(3.5), None)
    assert compare_rows([], [1.0, 2.0]) == (None, None)


@pytest.mark.parametrize(
    ("relation", "ours", "theirs", "verdict"),
    [
        # d = 12, 2 SE = 3.27
        (">", [50, 52, 54], [38, 40, 42], HOLDS),
        ("<", [50, 52, 54], [38, 40, 42], DOES_NOT_HOLD),
        (">=", [50, 52, 54], [38, 40, 42], HOLDS),
        ("<=", [50, 52, 54], [38, 40, 42], DOES_NOT_HOLD),
        # d = 0, SE = sqrt(4/3 + 16/3) = 2.58
        (">", [50, 52, 54], [48, 52, 56], NOT_SEPARATED),
        ("<", [50, 52, 54], [48, 52, 56], NOT_SEPARATED),
        (">=", [50, 52, 54], [48, 52, 56], HOLDS),
        ("<=", [50, 52, 54], [48, 52, 56], HOLDS),
        # d = 3 against 2 SE = 3.27: within; d = 4: beyond
        (">", [50, 52, 54], [47, 49, 51], NOT_SEPARATED),
        (">", [50, 52, 54], [46, 48, 50], HOLDS),
        ("<=", [50, 52, 54], [46, 48, 50], DOES_NOT_HOLD),
        ("<=", [50, 52, 54], [47, 49, 51], HOLDS),
        # one seed: no standard error
        (">", [90], [10, 11], NOT_CHECKED),
    ],
)
def test_one_pair(relation: str, ours: list[float], theirs: list[float], verdict: str) -> None:
    result = check_claim(claim(relation), {"xder": ours, "derpp": theirs})
    assert result.verdict == verdict
    assert len(result.pairs) == 1
    assert result.deciding == result.pairs[0]


def test_the_margin_is_signed_the_claims_way() -> None:
    up = check_claim(claim(">"), {"xder": [50, 52, 54], "derpp": [38, 40, 42]}).deciding
    down = check_claim(claim("<"), {"xder": [50, 52, 54], "derpp": [38, 40, 42]}).deciding
    assert up.margin == pytest.approx(12 / math.sqrt(8 / 3))
    assert down.margin == pytest.approx(-12 / math.sqrt(8 / 3))
    assert (up.mean, up.other_mean, up.n, up.other_n) == (52, 40, 3, 3)


def test_several_pairs_take_the_worst() -> None:
    best = claim(">", rows=("xder",), than=("er", "derpp", "xder"))  # xder against itself: skipped
    values = {"xder": [50, 52, 54], "er": [20, 22, 24], "derpp": [46, 48, 50]}
    result = check_claim(best, values)
    assert [(p.row, p.other) for p in result.pairs] == [("xder", "er"), ("xder", "derpp")]
    assert result.verdict == HOLDS  # d 30 and d 4, both beyond 3.27
    assert result.deciding.other == "derpp"  # the smaller margin
    values["derpp"] = [49, 51, 53]  # d = 1: not separated
    assert check_claim(best, values).verdict == NOT_SEPARATED
    values["er"] = [58, 60, 62]  # ER above X-DER by 8: the claim fails whatever DER++ does
    result = check_claim(best, values)
    assert result.verdict == DOES_NOT_HOLD
    assert result.deciding.other == "er"


def test_a_missing_row_leaves_its_pairs_unchecked_but_a_failure_still_counts() -> None:
    best = claim(">", rows=("xder",), than=("er", "derpp"))
    result = check_claim(best, {"xder": [50, 52, 54], "er": [20, 22, 24]})
    assert result.verdict == NOT_CHECKED
    assert result.missing == ("derpp",)
    result = check_claim(best, {"xder": [50, 52, 54], "er": [60, 62, 64]})
    assert result.verdict == DOES_NOT_HOLD
    assert result.missing == ("derpp",)


def test_a_malformed_claim_is_refused() -> None:
    with pytest.raises(ValueError, match="relation"):
        claim("!=")
    with pytest.raises(ValueError, match="compares no row"):
        claim(">", rows=("xder",), than=("xder",))
    with pytest.raises(ValueError, match="at least one"):
        claim(">", rows=(), than=("er",))


def test_applies_to() -> None:
    c = Claim("c", "t", "s", "faa", ("a",), ">", ("b",), ("seq-cifar100",), (500,))
    assert c.applies_to("seq-cifar100", 500)
    assert not c.applies_to("seq-cifar100", 2000)
    assert not c.applies_to("seq-cifar10", 500)
    assert claim(">").applies_to("seq-cifar100", 2000)  # no buffer sizes: every one


def test_a_pair_records_its_fields_in_their_order() -> None:
    """A pair's JSON record is its fields, named and ordered as PairVerdict declares them, and the
    record's type declares the same keys."""
    pair = PairVerdict("xder", "derpp", 52.0, 40.0, 3, 3, 12.0, 1.633, 7.35, HOLDS)
    record = pair.record()
    assert list(record) == list(PairRecord.__annotations__)
    assert list(record.values()) == ["xder", "derpp", 52.0, 40.0, 3, 3, 12.0, 1.633, 7.35, HOLDS]
