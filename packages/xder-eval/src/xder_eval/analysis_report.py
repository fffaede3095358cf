"""The paper's analyses over many runs: SS-ERR, SS-NLL, ECE and the newest-head share as mean ± std
over seeds, beside the paper's figures, with the direction of each of the paper's orderings checked.

The input is a :class:`xder_eval.Report` (its groups of runs) and, per run directory, the
``analyses`` object of its ``analysis/analysis.json`` (written by ``xder-run analyze``), already
parsed; this module reads no file. Per group (one row of a report column):

* :func:`analysis_values` takes from one run's analyses the four figures of the paper's Sec. 6:
  ``ss_err`` (fraction), ``ss_nll`` (nats), ``ece`` (%, the fraction the analysis stores times
  100) and ``newest_head_share`` (%: of the final model's mistakes on past test items, the share
  predicted in the newest task's classes, Fig. "derpperrors");
* each figure is summarised over the group's seeds that have it (mean, sample std with ``ddof=1``
  from two seeds on: :class:`xder_eval.SeedStats`); the newest-head share after each task is
  averaged per task for the plot;
* a :class:`PublishedAnalysis` (the paper's secondary-information table, passed in by the caller)
  matches a group of the same benchmark, buffer size and table entry. Runs on another protocol
  than the paper's match it too (the report's benchmark ``"seq-cifar100 (laptop)"`` is
  ``seq-cifar100`` here), for orientation: the figures come from another protocol.

The paper's orderings (:func:`paper_orders`): for every two rows of a column that both have our
mean and a published value of one metric, and whose published values differ, the paper's order
(which row is lower) is compared with the order of our means: ``agrees`` when our means are
ordered the same way, else not (equal means do not agree). Beside the direction, whether our two
means are ``separated``: their difference beyond two standard errors
(:func:`xder_eval.compare_rows`, the claims' rule; None below two seeds on either side), so that a
disagreement within the noise reads as such.

Worked example: the paper's SS-ERR at buffer 500 is X-DER 0.57, ER 0.71; ours X-DER 0.83 and ER
0.84: X-DER is lower in both, the order agrees although every value of ours is higher.

matplotlib (the ``[plots]`` extra) is imported only when a plot is drawn.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from xder_eval.claims import compare_rows
from xder_eval.plots import legend_outside, new_figure, save_figure
from xder_eval.published import preset_entry_name
from xder_eval.report import GroupSummary, Report, ReportColumn, SeedStats, seed_stats

__all__ = [
    "ANALYSIS_METRICS",
    "AnalysisMetric",
    "AnalysisRow",
    "PaperOrder",
    "PublishedAnalysis",
    "analyses_dict",
    "analyses_markdown",
    "analysis_rows",
    "analysis_values",
    "base_benchmark",
    "newest_head_curve",
    "paper_orders",
    "plot_analyses",
]


@dataclass(frozen=True)
class AnalysisMetric:
    """One of the figures: its label, unit and number format (lower is better for all four)."""

    label: str
    unit: str
    digits: int


ANALYSIS_METRICS: dict[str, AnalysisMetric] = {
    "ss_err": AnalysisMetric("SS-ERR", "fraction", 3),
    "ss_nll": AnalysisMetric("SS-NLL", "nats", 2),
    "ece": AnalysisMetric("ECE", "%", 1),
    "newest_head_share": AnalysisMetric("newest-head share", "%", 1),
}
"""The figures tabulated, by their names in claims and published data, in table order."""


def _finite(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return float(value)


def analysis_values(analyses: Mapping[str, Any]) -> dict[str, float]:
    """The figures of :data:`ANALYSIS_METRICS` found in one run's ``analyses`` object (the
    ``analyses`` key of ``analysis.json``); absent or non-finite ones are left out. ECE and the
    newest-head share become percentages."""
    out: dict[str, float] = {}
    for key in ("ss_err", "ss_nll"):
        if (value := _finite(analyses.get(key))) is not None:
            out[key] = value
    ece = analyses.get("ece")
    if isinstance(ece, Mapping) and (value := _finite(ece.get("ece"))) is not None:
        out["ece"] = 100.0 * value
    bias = analyses.get("head_bias")
    if isinstance(bias, Mapping) and (value := _finite(bias.get("newest_head_share"))) is not None:
        out["newest_head_share"] = 100.0 * value
    return out


def newest_head_curve(analyses: Mapping[str, Any]) -> dict[int, float]:
    """After each task ``t`` (0-based, from the second on), the share (%) of the mistakes on the
    tasks before ``t`` that are predicted in task ``t``'s classes: ``fraction_by_head[t]`` of the
    head-bias analysis's entry for ``t``; ``{}`` without that analysis."""
    bias = analyses.get("head_bias")
    if not isinstance(bias, Mapping):
        return {}
    curve: dict[int, float] = {}
    for entry in bias.get("per_task") or ():
        task, fractions = entry.get("task"), entry.get("fraction_by_head")
        if not (isinstance(task, int) and isinstance(fractions, list) and 0 <= task < len(fractions)):
            continue
        if (value := _finite(fractions[task])) is not None:
            curve[task] = 100.0 * value
    return curve


def base_benchmark(benchmark: str) -> str:
    """A report benchmark without its protocol: ``"seq-cifar100 (laptop)"`` -> ``"seq-cifar100"``."""
    return benchmark.split(" (", 1)[0]


@dataclass(frozen=True)
class PublishedAnalysis:
    """One row of a paper's analysis table: a benchmark, a buffer size, a table entry (a method or
    a variant's preset entry, as :class:`xder_eval.PublishedResult`), and its figures by
    :data:`ANALYSIS_METRICS` name (the paper's units: SS-ERR a fraction, SS-NLL in nats)."""

    benchmark: str
    buffer_size: int
    entry: str
    method: str
    values: Mapping[str, float]
    source: str = ""
    row: str = ""

    def matches(self, benchmark: str, buffer_size: int, method: str, preset: str) -> bool:
        """Whether a group of ``method`` runs with ``preset`` on ``benchmark`` (any protocol) at
        ``buffer_size`` is this row's."""
        return (
            self.benchmark == base_benchmark(benchmark)
            and self.buffer_size == buffer_size
            and self.method == method
            and self.entry == preset_entry_name(method, preset)
        )


@dataclass(frozen=True)
class AnalysisRow:
    """A group's analyses: its report row name, table entry, per-figure statistics over the seeds
    that have each figure, the mean newest-head share after each task, and the published row it
    matches (None if none)."""

    name: str
    entry: str
    key: Any
    stats: Mapping[str, SeedStats]
    curve: Mapping[int, float] = field(default_factory=dict)
    published: PublishedAnalysis | None = None
    mistakes: int | None = None
    """The final models' mistakes on past tasks, summed over the seeds analysed: what the
    newest-head share is a share of (None where the analyses predate the count)."""

    def mean(self, metric: str) -> float | None:
        stat = self.stats.get(metric)
        return None if stat is None else stat.mean


def analysis_rows(
    report: Report,
    column: ReportColumn,
    analyses: Mapping[str, Mapping[str, Any]],
    published: Sequence[PublishedAnalysis] = (),
) -> list[AnalysisRow]:
    """The rows of ``column`` (in the report's row order) whose runs have at least one figure in
    ``analyses`` (run path -> its ``analyses`` object); each with its statistics, its mean
    newest-head curve and the ``published`` row it matches."""
    out = []
    for row in report.rows:
        group: GroupSummary | None = report.cell(row, column)
        if group is None:
            continue
        per_run = [analyses[p] for p in group.paths if p in analyses]
        values = [analysis_values(a) for a in per_run]
        if not any(values):
            continue
        stats = {m: seed_stats([v[m] for v in values if m in v]) for m in ANALYSIS_METRICS}
        curves = [newest_head_curve(a) for a in per_run]
        tasks = sorted({t for c in curves for t in c})
        curve = {t: float(np.mean([c[t] for c in curves if t in c])) for t in tasks}
        k = group.key
        match = next(
            (p for p in published if p.matches(k.benchmark, k.buffer_size, k.method, k.preset)), None
        )
        entry = preset_entry_name(k.method, k.preset)
        counts = [a["head_bias"].get("mistakes") for a in per_run if isinstance(a.get("head_bias"), Mapping)]
        mistakes = (
            sum(c for c in counts if isinstance(c, int)) if any(isinstance(c, int) for c in counts) else None
        )
        out.append(AnalysisRow(row.name, entry, k, stats, curve, match, mistakes))
    return out


@dataclass(frozen=True)
class PaperOrder:
    """One pair of rows ordered by the paper on one figure: ``lower`` has the lower published
    value; ``agrees`` whether our means order them the same way."""

    metric: str
    lower: str
    higher: str
    paper_lower: float
    paper_higher: float
    ours_lower: float
    ours_higher: float
    separated: bool | None = None

    @property
    def agrees(self) -> bool:
        return self.ours_lower < self.ours_higher

    def verdict(self) -> str:
        """``agrees`` or ``**does not agree**``, with ``(within 2 SE)`` where our means are not
        separated."""
        words = "agrees" if self.agrees else "**does not agree**"
        return words + (" (within 2 SE)" if self.separated is False else "")


def paper_orders(rows: Sequence[AnalysisRow], metric: str) -> list[PaperOrder]:
    """Every pair of ``rows`` with our mean and a published value of ``metric``, the published
    values different: the paper's order against ours (module docstring), in row order."""
    have = [
        (r, r.published.values[metric], r.mean(metric))
        for r in rows
        if r.published is not None and metric in r.published.values and r.mean(metric) is not None
    ]
    out = []
    for i, (a, paper_a, ours_a) in enumerate(have):
        for b, paper_b, ours_b in have[i + 1 :]:
            if paper_a == paper_b:
                continue
            pair = sorted(((a, paper_a, ours_a), (b, paper_b, ours_b)), key=lambda x: x[1])
            (lo, p_lo, o_lo), (hi, p_hi, o_hi) = pair
            difference, se = compare_rows(lo.stats[metric].values, hi.stats[metric].values)
            separated = None if se is None or difference is None else abs(difference) > 2 * se
            order = PaperOrder(metric, lo.name, hi.name, p_lo, p_hi, float(o_lo), float(o_hi), separated)  # type: ignore[arg-type]
            out.append(order)
    return out


def _number(value: float | None, digits: int) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _stat_text(stat: SeedStats | None, digits: int) -> str:
    if stat is None or stat.mean is None:
        return "-"
    text = _number(stat.mean, digits)
    return text + (f" ± {_number(stat.std, digits)}" if stat.std is not None else "") + f" (n {stat.n})"


def analyses_markdown(column: ReportColumn, rows: Sequence[AnalysisRow]) -> str:
    """The analyses of one column: a table of our figures (mean ± std (n seeds)) with the paper's
    beside them, then the paper's orderings and whether ours agree."""
    other_protocol = base_benchmark(column.benchmark) != column.benchmark
    lines = [
        f"## Analyses: {column.header}",
        "",
        "Ours: mean ± sample std over the seeds analysed (n); paper: the published figure"
        + (" (on the paper's protocol: for orientation)." if other_protocol else "."),
        "Lower is better for all four. SS-ERR and SS-NLL: the secondary super-class error and NLL;"
        " ECE in %; newest-head share: of the final model's mistakes on past tasks, the % predicted"
        " in the newest task's classes.",
        "",
    ]
    header = ["method"]
    for metric, spec in ANALYSIS_METRICS.items():
        header += [spec.label] + (["paper"] if any(_paper(r, metric) is not None for r in rows) else [])
    lines += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for r in rows:
        cells = [r.name]
        for metric, spec in ANALYSIS_METRICS.items():
            counted = metric == "newest_head_share" and r.mistakes and r.mean(metric) is not None
            count = f", of {r.mistakes} mistakes" if counted else ""
            cells.append(_stat_text(r.stats.get(metric), spec.digits) + count)
            if any(_paper(x, metric) is not None for x in rows):
                cells.append(_number(_paper(r, metric), spec.digits))
        lines.append("| " + " | ".join(cells) + " |")
    orders = [o for metric in ANALYSIS_METRICS for o in paper_orders(rows, metric)]
    if orders:
        agreed = sum(o.agrees for o in orders)
        lines += ["", f"The paper's orderings, in ours: {agreed} of {len(orders)} agree in direction.", ""]
        for o in orders:
            spec = ANALYSIS_METRICS[o.metric]
            d = spec.digits
            lines.append(
                f"- {spec.label}: {o.lower} below {o.higher} in the paper "
                f"({_number(o.paper_lower, d)} < {_number(o.paper_higher, d)}); ours "
                f"{_number(o.ours_lower, d)} against {_number(o.ours_higher, d)}: " + o.verdict()
            )
    sources = list(
        dict.fromkeys(r.published.source for r in rows if r.published is not None and r.published.source)
    )
    if sources:
        lines += ["", "Published figures: " + "; ".join(sources) + "."]
    return "\n".join(lines) + "\n"


def _paper(row: AnalysisRow, metric: str) -> float | None:
    return None if row.published is None else row.published.values.get(metric)


def analyses_dict(column: ReportColumn, rows: Sequence[AnalysisRow]) -> dict[str, Any]:
    """The JSON-ready analyses of one column (``report.json``'s ``analyses`` entries)."""

    def stat(s: SeedStats) -> dict[str, Any]:
        return {"mean": s.mean, "std": s.std, "values": list(s.values)}

    return {
        "benchmark": column.benchmark,
        "buffer_size": column.buffer_size,
        "rows": [
            {
                "name": r.name,
                "entry": r.entry,
                "figures": {m: stat(s) for m, s in r.stats.items() if s.mean is not None},
                "newest_head_curve": {str(t): v for t, v in r.curve.items()},
                "mistakes": r.mistakes,
                "published": None if r.published is None else dict(r.published.values),
                "published_source": None if r.published is None else r.published.source,
            }
            for r in rows
        ],
        "paper_orders": [
            {
                "metric": o.metric,
                "lower": o.lower,
                "higher": o.higher,
                "paper": [o.paper_lower, o.paper_higher],
                "ours": [o.ours_lower, o.ours_higher],
                "agrees": o.agrees,
                "separated": o.separated,
            }
            for metric in ANALYSIS_METRICS
            for o in paper_orders(rows, metric)
        ],
    }


def plot_analyses(
    column: ReportColumn, rows: Sequence[AnalysisRow], path: str | Path, *, note: str | None = None
) -> Path:
    """One figure per column: a panel per figure (ours: a bar per row, the mean with ± std
    whiskers; the paper's figure: a black diamond where it publishes one), and the newest-head
    share after each task, one line per row (the paper's Fig. "derpperrors" view of the bias)."""
    fig = new_figure(12.0, 7.5)
    names = [r.name for r in rows]
    x = np.arange(len(rows))
    colours = [f"C{i % 10}" for i in range(len(rows))]
    for index, (metric, spec) in enumerate(ANALYSIS_METRICS.items()):
        ax = fig.add_subplot(2, 3, index + 1)
        means = [r.mean(metric) for r in rows]
        stds = [(r.stats[metric].std or 0.0) if r.mean(metric) is not None else 0.0 for r in rows]
        ax.bar(x, [np.nan if m is None else m for m in means], yerr=stds, color=colours, alpha=0.8, capsize=3)
        paper = [np.nan if (p := _paper(r, metric)) is None else p for r in rows]
        if not np.all(np.isnan(paper)):
            ax.scatter(x, paper, marker="D", color="black", zorder=3)
        ax.set_xticks(x, names, rotation=30, ha="right", fontsize=8)
        ax.set_xlabel("method")
        ax.set_ylabel(spec.unit)
        ax.set_title(f"{spec.label} (lower is better)", fontsize=10)
        ax.grid(axis="y", alpha=0.3)
    ax = fig.add_subplot(2, 3, (5, 6))
    for i, r in enumerate(rows):
        if r.curve:
            tasks = sorted(r.curve)
            values = [r.curve[t] for t in tasks]
            ax.plot([t + 1 for t in tasks], values, marker="osD^vPX*"[i % 8], color=colours[i], label=r.name)
    ax.set_xlabel("tasks trained")
    ax.set_ylabel("past-task mistakes in the newest head (%)")
    ax.set_ylim(0, 100)
    ax.set_title("newest-head share after each task (mean over seeds)", fontsize=10)
    ax.grid(alpha=0.3)
    legend_outside(ax)
    fig.suptitle(f"{column.header}: bars ours (mean ± std over seeds), black diamonds the paper's figures")
    return save_figure(fig, path, run=note)
