"""The papers' claims about their tables, shipped as data (``presets/claims.toml``, beside
``published.toml``) and checked on a trained table by ``xder-run experiment table``.

Each claim becomes an :class:`xder_eval.Claim`; :func:`check_table_claims` checks those about one
benchmark's table at one buffer size on our per-seed values (:func:`xder_eval.check_claim`: the
two-standard-error rule on differences of means) and :func:`claims_markdown` writes them out.
"""

from __future__ import annotations

import dataclasses
import functools
import tomllib
from collections.abc import Collection, Mapping, Sequence
from importlib import resources
from typing import Any

from xder_eval import RELATIONS, Claim, ClaimVerdict, check_claim

__all__ = [
    "CLAIMS_FILE",
    "CLAIM_RULE",
    "check_table_claims",
    "claim_line",
    "claims",
    "claims_markdown",
    "on_table",
    "table_claims",
]

CLAIMS_FILE = "claims.toml"
CLAIM_RULE = (
    "each pair of rows is compared by the difference of their means over seeds against two standard "
    "errors (SE = sqrt(s1²/n1 + s2²/n2)); a claim over several pairs takes its worst pair"
)
_KEYS = {"id", "text", "section", "benchmarks", "buffer_sizes", "metric", "rows", "relation", "than"}
_METRICS = {"faa", "ff"}


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
            raise ValueError(f"{CLAIMS_FILE}: {where}.metric must be faa or ff, got {raw['metric']!r}")
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
    return _parse(tomllib.loads((resources.files("xder_cli.runs") / "presets" / CLAIMS_FILE).read_text()))


def table_claims(benchmark: str, buffer_size: int) -> list[Claim]:
    """The claims about ``benchmark``'s table at ``buffer_size``."""
    return [c for c in claims() if c.applies_to(benchmark, buffer_size)]


def _pair(pair: Any) -> dict[str, Any] | None:
    if pair is None:
        return None
    keys = ("row", "other", "mean", "other_mean", "n", "other_n", "difference", "standard_error", "margin")
    return {key: getattr(pair, key) for key in keys} | {"verdict": pair.verdict}


def _record(result: ClaimVerdict) -> dict[str, Any]:
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
) -> list[dict[str, Any]]:
    """Check every claim about ``benchmark``'s table at ``buffer_size``, among that table's rows
    (``entries``, :func:`on_table`), on ``values`` (metric -> entry -> our per-seed values); one
    JSON-ready record per claim: the claim, its verdict, the deciding pair, every pair, and the
    entries it names that have no values (rows not trained, or not finished)."""
    found = [c for c in (on_table(c, entries) for c in table_claims(benchmark, buffer_size)) if c]
    return [_record(check_claim(claim, values.get(claim.metric, {}))) for claim in found]


def _number(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def claim_line(record: Mapping[str, Any]) -> str:
    """One claim as a Markdown list item: verdict, the claim, and the deciding pair's numbers."""
    line = f"- **{record['verdict']}**: {record['text']} ({record['section']})."
    pair = record["deciding"]
    if pair is not None and pair["difference"] is not None:
        metric = record["metric"].upper()
        line += (
            f" {metric}, {pair['row']} {RELATIONS[record['relation']]} {pair['other']}?"
            f" {_number(pair['mean'])} (n {pair['n']}) against {_number(pair['other_mean'])}"
            f" (n {pair['other_n']}): difference {pair['difference']:+.2f}"
        )
        se = pair["standard_error"]
        line += f", 2 SE {2 * se:.2f}." if se is not None else ", standard error undefined (one seed)."
    if record["missing"]:
        line += f" Not in this table: {', '.join(record['missing'])}."
    return line


def claims_markdown(records: Sequence[Mapping[str, Any]]) -> list[str]:
    """The claims section of a table's Markdown (no lines where there are no claims)."""
    if not records:
        return []
    lines = ["", "## The papers' claims, checked on this table", "", f"Rule: {CLAIM_RULE}.", ""]
    return lines + [claim_line(r) for r in records]
