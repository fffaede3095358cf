"""The papers' claims about their tables and analyses, shipped as data (``papers/claims.toml``,
beside ``published.toml``), checked on a trained table by ``xder-run experiment table`` (the
claims on FAA and FF, :data:`TABLE_METRICS`) and on analysed runs by ``xder-run report`` (those
on the analyses' figures, :data:`xder_eval.ANALYSIS_METRICS`).

Each claim becomes an :class:`xder_eval.Claim`; :func:`check_table_claims` checks those about one
benchmark's table at one buffer size on our per-seed values (:func:`xder_eval.check_claim`: the
two-standard-error rule on differences of means), with the direction of the means beside the
verdict, and :func:`claims_markdown` writes them out.
"""

from __future__ import annotations

import dataclasses
import functools
import tomllib
from collections.abc import Collection, Mapping, Sequence
from importlib import resources
from typing import Any, TypedDict

from xder_cli.runs.published import PAPERS
from xder_eval import (
    ANALYSIS_METRICS,
    NOT_CHECKED,
    NOT_SEPARATED,
    RELATIONS,
    Claim,
    ClaimVerdict,
    PairRecord,
    PairVerdict,
    check_claim,
)

__all__ = [
    "CLAIMS_FILE",
    "CLAIM_RULE",
    "TABLE_METRICS",
    "check_table_claims",
    "claim_line",
    "claims",
    "claims_markdown",
    "direction",
    "on_table",
    "table_claims",
]

CLAIMS_FILE = "claims.toml"
CLAIM_RULE = (
    "each pair of rows is compared by the difference of their means over seeds against two standard "
    "errors (SE = sqrt(s1²/n1 + s2²/n2)); a claim over several pairs takes its worst pair"
)
_KEYS = {"id", "text", "section", "benchmarks", "buffer_sizes", "metric", "rows", "relation", "than"}
TABLE_METRICS = ("faa", "ff")
"""The metrics of a trained table's claims; the others are the analyses' figures."""
_METRICS = {*TABLE_METRICS, *ANALYSIS_METRICS}


def _strings(raw: dict[str, Any], key: str, where: str) -> tuple[str, ...]:
    value = raw.get(key)
    if not isinstance(value, list) or not value or not all(isinstance(v, str) for v in value):
        raise ValueError(f"{CLAIMS_FILE}: {where}.{key} must be a non-empty list of names")
    return tuple(value)


def _parse(data: dict[str, Any]) -> tuple[Claim, ...]:
    """Every claim in file order; raises ValueError on a malformed file (shipped data: a bug,
    caught by the tests)."""
    extra = sorted(set(data) - {"claim"})
    if extra:
        raise ValueError(f"{CLAIMS_FILE}: only [[claim]] tables belong here, found {extra}")
    out = []
    for index, raw in enumerate(data.get("claim", [])):
        where = f"claim {index + 1}" + (f" ({raw['id']})" if isinstance(raw.get("id"), str) else "")
        missing = _KEYS - {"buffer_sizes"} - set(raw)
        if set(raw) - _KEYS or missing:
            needed = ", ".join(sorted(missing))
            raise ValueError(f"{CLAIMS_FILE}: {where} needs {needed} (and only {sorted(_KEYS)})")
        if raw["metric"] not in _METRICS:
            known = ", ".join(sorted(_METRICS))
            raise ValueError(f"{CLAIMS_FILE}: {where}.metric must be one of {known}, got {raw['metric']!r}")
        sizes = raw.get("buffer_sizes", [])
        if not isinstance(sizes, list) or any(isinstance(s, bool) or not isinstance(s, int) for s in sizes):
            raise ValueError(f"{CLAIMS_FILE}: {where}.buffer_sizes must be a list of integers")
        out.append(
            Claim(
                id=str(raw["id"]),
                text=str(raw["text"]),
                section=str(raw["section"]),
                metric=raw["metric"],
                rows=_strings(raw, "rows", where),
                relation=str(raw["relation"]),
                than=_strings(raw, "than", where),
                benchmarks=_strings(raw, "benchmarks", where),
                buffer_sizes=tuple(sizes),
            )
        )
    return tuple(out)


@functools.cache
def claims() -> tuple[Claim, ...]:
    """Every shipped claim, in the file's order."""
    return _parse(tomllib.loads((resources.files("xder_cli.runs") / PAPERS / CLAIMS_FILE).read_text()))


def table_claims(benchmark: str, buffer_size: int, metrics: Collection[str] = TABLE_METRICS) -> list[Claim]:
    """The claims about ``benchmark``'s table at ``buffer_size`` on ``metrics`` (default: the
    table's, FAA and FF)."""
    return [c for c in claims() if c.applies_to(benchmark, buffer_size) and c.metric in metrics]


class ClaimRecord(TypedDict):
    """A claim checked on a table, JSON-ready (:func:`check_table_claims`)."""

    id: str
    text: str
    section: str
    metric: str
    rows: list[str]
    relation: str
    than: list[str]
    verdict: str
    direction: str | None
    deciding: PairRecord | None
    pairs: list[PairRecord | None]
    missing: list[str]


def _pair(pair: PairVerdict | None) -> PairRecord | None:
    return None if pair is None else pair.record()


def direction(result: ClaimVerdict) -> str | None:
    """Whether the means go the claim's way in every pair that has both (``"agrees"``), or
    against it in at least one (``"against"``): the direction alone, whatever the noise; None
    where no pair has two means. ``>=`` and ``<=`` count equal means as agreeing."""
    signs = []
    for pair in result.pairs:
        if pair.difference is None:
            continue
        signed = pair.difference if result.claim.relation in (">", ">=") else -pair.difference
        signs.append(signed > 0 or (signed == 0 and result.claim.relation in (">=", "<=")))
    if not signs:
        return None
    return "agrees" if all(signs) else "against"


def _record(result: ClaimVerdict) -> ClaimRecord:
    claim = result.claim
    return {
        "id": claim.id,
        "text": claim.text,
        "section": claim.section,
        "metric": claim.metric,
        "rows": list(claim.rows),
        "relation": claim.relation,
        "than": list(claim.than),
        "verdict": result.verdict,
        "direction": direction(result),
        "deciding": _pair(result.deciding),
        "pairs": [_pair(p) for p in result.pairs],
        "missing": list(result.missing),
    }


def on_table(claim: Claim, entries: Collection[str]) -> Claim | None:
    """``claim`` restricted to the rows of a table (``entries``: a published table's entries, e.g.
    the DER paper's Seq-CIFAR-10 has no iCaRL at buffer 5120); None where it then compares nothing."""
    rows = tuple(r for r in claim.rows if r in entries)
    than = tuple(t for t in claim.than if t in entries)
    if not any(r != t for r in rows for t in than):
        return None
    return dataclasses.replace(claim, rows=rows, than=than)


def check_table_claims(
    benchmark: str,
    buffer_size: int,
    entries: Collection[str],
    values: Mapping[str, Mapping[str, Sequence[float]]],
    metrics: Collection[str] = TABLE_METRICS,
) -> list[ClaimRecord]:
    """Check every claim on ``metrics`` about ``benchmark``'s table at ``buffer_size``, among
    that table's rows (``entries``, :func:`on_table`), on ``values`` (metric -> entry -> our
    per-seed values); one JSON-ready record per claim: the claim, its verdict, the direction of
    the means (:func:`direction`), the deciding pair, every pair, and the entries it names that
    have no values (rows not trained, or not finished)."""
    claimed = table_claims(benchmark, buffer_size, metrics)
    found = [c for c in (on_table(c, entries) for c in claimed) if c]
    return [_record(check_claim(claim, values.get(claim.metric, {}))) for claim in found]


_METRIC_LABELS = {name: spec.label for name, spec in ANALYSIS_METRICS.items()}


def _number(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def claim_line(record: Mapping[str, Any]) -> str:
    """One claim as a Markdown list item: verdict, the claim, and the deciding pair's numbers."""
    line = f"- **{record['verdict']}**: {record['text']} ({record['section']})."
    pair = record["deciding"]
    if pair is not None and pair["difference"] is not None:
        metric = _METRIC_LABELS.get(record["metric"], record["metric"].upper())
        spec = ANALYSIS_METRICS.get(record["metric"])
        d = 2 if spec is None else spec.digits  # FAA and FF: 2 decimals, as the tables
        line += (
            f" {metric}, {pair['row']} {RELATIONS[record['relation']]} {pair['other']}?"
            f" {_number(pair['mean'], d)} (n {pair['n']}) against {_number(pair['other_mean'], d)}"
            f" (n {pair['other_n']}): difference {pair['difference']:+.{d}f}"
        )
        se = pair["standard_error"]
        line += f", 2 SE {2 * se:.{d}f}." if se is not None else ", standard error undefined (one seed)."
    if record["verdict"] in (NOT_CHECKED, NOT_SEPARATED) and record.get("direction"):
        line += (
            " The means go the claim's way in every pair."
            if record["direction"] == "agrees"
            else " The means go against the claim in at least one pair."
        )
    if record["missing"]:
        line += f" Not in this table: {', '.join(record['missing'])}."
    return line


def claims_markdown(records: Sequence[Mapping[str, Any]]) -> list[str]:
    """The claims section of a table's Markdown (no lines where there are no claims)."""
    if not records:
        return []
    lines = ["", "## The papers' claims, checked on this table", "", f"Rule: {CLAIM_RULE}.", ""]
    return lines + [claim_line(r) for r in records]
