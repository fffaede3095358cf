"""The report's table (steps 3 and 4 of :mod:`xder_eval.report`): every group summarized, its
missing and repeated seeds listed as problems, one row per (method, preset, settings) in the
paper's Table 1 order, one column per (benchmark, buffer size) with its scenario, and each group
matched with the published cell it belongs to."""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from collections.abc import Collection, Iterable, Mapping

from xder_eval.published import PublishedResult
from xder_eval.report.grouping import _CLASS_IL_ONLY, _identify, group_runs, summarize_group
from xder_eval.report.records import (
    GroupKey,
    GroupSummary,
    Report,
    ReportColumn,
    ReportRow,
    RunProblem,
    RunRecord,
    ScenarioFacts,
)

__all__ = ["build_report", "group_title"]

# Rows follow the paper's Table 1 (bounds, regularisation, replay, DER family); other methods
# come after, alphabetically.
_METHOD_ORDER = (
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


def _method_rank(method: str) -> tuple[int, str]:
    return (_METHOD_ORDER.index(method) if method in _METHOD_ORDER else len(_METHOD_ORDER), method)


def build_report(
    records: Iterable[RunRecord],
    published: Iterable[PublishedResult] = (),
    *,
    ignore: Collection[str] = (),
    scenarios: Mapping[str, ScenarioFacts] = _CLASS_IL_ONLY,
) -> Report:
    """Group ``records`` (:func:`group_runs`, ``ignore`` and ``scenarios`` as there), summarize
    every group, lay out the table and list the problems; match each group with the
    ``published`` cell it belongs to, if any.

    Never raises on a bad run: it becomes a :class:`RunProblem`.
    """
    records = list(records)
    grouped, problems = group_runs(records, ignore, scenarios=scenarios)

    expected: dict[str, set[int]] = defaultdict(set)  # every seed tried on a benchmark
    for record in records:
        run = _identify(record)
        if run.benchmark is not None and run.seed is not None:
            expected[run.benchmark].add(run.seed)

    summaries: list[GroupSummary] = []
    group_problems: list[RunProblem] = []
    for key in sorted(grouped, key=lambda k: (k.benchmark, k.buffer_size, *_method_rank(k.method), k)):
        summary = summarize_group(key, grouped[key], scenarios[key.scenario])
        missing = tuple(sorted(expected[key.benchmark] - set(summary.seeds)))
        summary = dataclasses.replace(summary, missing_seeds=missing)
        summaries.append(summary)
        where = group_title(key)
        if missing:
            group_problems.append(
                RunProblem(
                    "missing_seeds",
                    f"{where}: seed{'s' if len(missing) > 1 else ''} {_join(missing)} missing "
                    f"(complete: {_join(summary.seeds)})",
                    method=key.method,
                    benchmark=key.benchmark,
                    buffer_size=key.buffer_size,
                    seeds=missing,
                )
            )
        for repeat in summary.repeated:
            group_problems.append(
                RunProblem(
                    "duplicate_seed",
                    f"{where}: seed {repeat.seed} run {1 + len(repeat.set_aside)} times, counted once: "
                    f"{repeat.counted} counts, set aside {', '.join(repeat.set_aside)} "
                    "(the first run directory by folder name counts)",
                    method=key.method,
                    benchmark=key.benchmark,
                    buffer_size=key.buffer_size,
                    seed=repeat.seed,
                    seeds=(repeat.seed,),
                )
            )

    row_keys = sorted(
        {(g.key.method, g.key.preset, g.key.settings) for g in summaries},
        key=lambda r: (*_method_rank(r[0]), r[1], r[2]),
    )
    per_method: defaultdict[str, int] = defaultdict(int)
    for method, _, _ in row_keys:
        per_method[method] += 1
    rows = tuple(
        ReportRow(
            method,
            preset,
            settings,
            method if per_method[method] == 1 else _variant_name(method, preset, settings),
        )
        for method, preset, settings in row_keys
    )

    keys = [g.key for g in summaries]
    buffered = {(k.benchmark, k.scenario, k.buffer_size, True) for k in keys if k.buffered}
    benchmarks = {(k.benchmark, k.scenario) for k in keys}
    columns = sorted(buffered | {(*b, 0, False) for b in benchmarks if not any(c[:2] == b for c in buffered)})
    cells = list(published)
    matched = {}
    for group in summaries:
        k = group.key
        match = next((p for p in cells if p.matches(k.benchmark, k.buffer_size, k.method, k.preset)), None)
        if match is not None:
            matched[k] = match
    return Report(
        groups=tuple(summaries),
        rows=rows,
        columns=tuple(ReportColumn(b, m, buffered, scenario) for b, scenario, m, buffered in columns),
        problems=tuple(problems + group_problems),
        published=matched,
        scenarios=dict(scenarios),
    )


def _variant_name(method: str, preset: str, settings: str) -> str:
    return f"{method} [{preset}; {settings}]" if settings else f"{method} [{preset}]"


def group_title(key: GroupKey) -> str:
    """A group in words: ``er [none] on seq-cifar10 m200`` (its method, preset and settings, on
    its column)."""
    where = ReportColumn(key.benchmark, key.buffer_size, key.buffered, key.scenario).header
    return f"{_variant_name(key.method, key.preset, key.settings)} on {where}"


def _join(values: Iterable[int]) -> str:
    return ", ".join(str(v) for v in values)
