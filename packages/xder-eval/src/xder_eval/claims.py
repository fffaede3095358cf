"""A paper's claims about its table, checked on our rows: holds, does not hold, or not separated.

A :class:`Claim` says that some rows of a table (``rows``) stand in a relation to others
(``than``) on one metric, e.g. "X-DER's FAA is above DER++'s" or "each ablation's FAA is at or
below X-DER's". This module holds no paper's claims and reads no file: the caller (``xder-cli``,
which ships them as data beside the published tables) passes them in, with our per-seed values.

Each (row, other) pair is judged by the two-standard-error rule on the difference of two means
(:func:`compare_rows`):

* ``d = mean(row) - mean(other)``, each mean over that row's seeds;
* ``SE = sqrt(s_row^2 / n_row + s_other^2 / n_other)``, the standard error of the difference of
  two independent means, each ``s`` the row's sample standard deviation (``ddof=1``); undefined
  (the pair is not checked) where a row has fewer than two finite values;
* relation ``>`` (above): **holds** if ``d > 2 SE``, **does not hold** if ``d < -2 SE``, else
  **not separated**; ``<`` (below) is its mirror;
* relation ``>=`` (at or above): **does not hold** if ``d < -2 SE``, else **holds** (a
  difference within the noise is "at"); ``<=`` is its mirror.

A claim over several pairs (``rows`` x ``than``, a row never against itself) takes the worst of its
pairs, in this order: does not hold, not checked, not separated, holds. So "X-DER has the highest
FAA of the rehearsal methods" holds only if X-DER is above every one of them by more than two
standard errors, and fails if any one is above X-DER by more than two. The deciding pair (the one
reported with the verdict) is the first pair with the verdict reached, that with the smallest
margin ``z = d / SE`` in the claim's direction among them.

Worked example: X-DER 50, 52, 54 (mean 52, s 2) against DER++ 38, 40, 42 (mean 40, s 2), claim
``>``: ``d = 12``, ``SE = sqrt(4/3 + 4/3) = 1.633``, ``2 SE = 3.27``: holds. Against DER++ 48, 52,
56 (mean 52, s 4): ``d = 0``, ``SE = sqrt(4/3 + 16/3) = 2.582``: not separated.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TypedDict, cast

__all__ = [
    "DOES_NOT_HOLD",
    "HOLDS",
    "NOT_CHECKED",
    "NOT_SEPARATED",
    "RELATIONS",
    "Claim",
    "ClaimVerdict",
    "PairRecord",
    "PairVerdict",
    "check_claim",
    "compare_rows",
]

HOLDS = "holds"
DOES_NOT_HOLD = "does not hold"
NOT_SEPARATED = "not separated"
NOT_CHECKED = "not checked"

RELATIONS = {">": "above", "<": "below", ">=": "at or above", "<=": "at or below"}
"""The relations a claim may state, with their words."""

_SEVERITY = (DOES_NOT_HOLD, NOT_CHECKED, NOT_SEPARATED, HOLDS)
"""A claim's verdict is the first of these that any of its pairs reached."""


@dataclass(frozen=True)
class Claim:
    """One claim of a paper about the rows of a table.

    Attributes:
        id: a short name (``xder-above-derpp``).
        text: the claim in words, as the paper makes it.
        section: where the paper makes it (``"Sec. 5.2, Table 1"``).
        metric: the metric compared (``faa`` or ``ff``), by the caller's name for it.
        rows: the entries the claim is about.
        relation: one of :data:`RELATIONS`.
        than: the entries they are compared with (each row against each of these, itself skipped).
        benchmarks: the benchmarks whose tables the claim is about.
        buffer_sizes: the buffer sizes it is about; empty: every one.
    """

    id: str
    text: str
    section: str
    metric: str
    rows: tuple[str, ...]
    relation: str
    than: tuple[str, ...]
    benchmarks: tuple[str, ...] = ()
    buffer_sizes: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if self.relation not in RELATIONS:
            known = ", ".join(RELATIONS)
            raise ValueError(f"claim {self.id}: relation must be one of {known}, got {self.relation!r}")
        if not self.rows or not self.than:
            raise ValueError(f"claim {self.id}: rows and than must each name at least one entry")
        if not any(row != other for row in self.rows for other in self.than):
            raise ValueError(f"claim {self.id}: compares no row with another")

    def applies_to(self, benchmark: str, buffer_size: int) -> bool:
        """Whether the claim is about ``benchmark``'s table at ``buffer_size``."""
        return benchmark in self.benchmarks and (not self.buffer_sizes or buffer_size in self.buffer_sizes)


@dataclass(frozen=True)
class PairVerdict:
    """One (row, other) pair of a claim.

    Attributes:
        row, other: the two entries.
        mean, other_mean: their means over their finite values (None without one).
        n, other_n: how many finite values each has.
        difference: ``mean - other_mean`` (None without both means).
        standard_error: of the difference (None below two values on either side).
        margin: ``difference / standard_error`` in the claim's direction (positive: the way the
            claim says; None where undefined or the standard error is 0 with no difference).
        verdict: holds, does not hold, not separated or not checked.
    """

    row: str
    other: str
    mean: float | None
    other_mean: float | None
    n: int
    other_n: int
    difference: float | None
    standard_error: float | None
    margin: float | None
    verdict: str

    def record(self) -> PairRecord:
        """The pair as JSON-ready fields, in this order (a claim's record in a table's JSON)."""
        return cast(PairRecord, dataclasses.asdict(self))


class PairRecord(TypedDict):
    """:meth:`PairVerdict.record`: a pair's fields, as :class:`PairVerdict` names and orders them."""

    row: str
    other: str
    mean: float | None
    other_mean: float | None
    n: int
    other_n: int
    difference: float | None
    standard_error: float | None
    margin: float | None
    verdict: str


@dataclass(frozen=True)
class ClaimVerdict:
    """A claim checked on a table: its verdict, the pair that decided it, and every pair."""

    claim: Claim
    verdict: str
    deciding: PairVerdict | None
    pairs: tuple[PairVerdict, ...] = field(default_factory=tuple)
    missing: tuple[str, ...] = ()
    """Entries the claim names that the table has no values for."""


def _finite(values: Sequence[float] | None) -> list[float]:
    return [float(v) for v in values or () if v is not None and math.isfinite(v)]


def compare_rows(values: Sequence[float], other: Sequence[float]) -> tuple[float | None, float | None]:
    """``(mean(values) - mean(other), SE)`` of two rows' per-seed values (non-finite values left
    out): the standard error of a difference of independent means, ``sqrt(s1^2/n1 + s2^2/n2)``
    with sample standard deviations; ``None`` where a row has no value (difference) or fewer than
    two (standard error)."""
    a, b = _finite(values), _finite(other)
    difference = statistics.fmean(a) - statistics.fmean(b) if a and b else None
    if len(a) < 2 or len(b) < 2:
        return difference, None
    return difference, math.sqrt(statistics.variance(a) / len(a) + statistics.variance(b) / len(b))


def _judge(relation: str, difference: float | None, se: float | None) -> tuple[float | None, str]:
    """The margin and verdict of one pair (module docstring)."""
    if difference is None or se is None:
        return None, NOT_CHECKED
    signed = difference if relation in (">", ">=") else -difference  # positive: the claim's way
    margin = signed / se if se > 0 else (math.copysign(math.inf, signed) if signed else 0.0)
    if signed < -2 * se:
        return margin, DOES_NOT_HOLD
    if relation in (">=", "<="):
        return margin, HOLDS
    return margin, HOLDS if signed > 2 * se else NOT_SEPARATED


def check_claim(claim: Claim, values: Mapping[str, Sequence[float]]) -> ClaimVerdict:
    """Check ``claim`` on a table: ``values`` maps each entry to its per-seed values of the
    claim's metric (an entry absent from it, or with no finite value, leaves its pairs not
    checked)."""
    pairs = []
    for row in claim.rows:
        for other in claim.than:
            if row == other:
                continue
            a, b = _finite(values.get(row)), _finite(values.get(other))
            difference, se = compare_rows(a, b)
            margin, verdict = _judge(claim.relation, difference, se)
            pairs.append(
                PairVerdict(
                    row=row,
                    other=other,
                    mean=statistics.fmean(a) if a else None,
                    other_mean=statistics.fmean(b) if b else None,
                    n=len(a),
                    other_n=len(b),
                    difference=difference,
                    standard_error=se,
                    margin=margin,
                    verdict=verdict,
                )
            )
    verdict = next(v for v in _SEVERITY if any(p.verdict == v for p in pairs))
    reached = [p for p in pairs if p.verdict == verdict]
    deciding = min(reached, key=lambda p: math.inf if p.margin is None else p.margin)
    named = dict.fromkeys((*claim.rows, *claim.than))
    missing = tuple(name for name in named if not _finite(values.get(name)))
    return ClaimVerdict(claim=claim, verdict=verdict, deciding=deciding, pairs=tuple(pairs), missing=missing)
