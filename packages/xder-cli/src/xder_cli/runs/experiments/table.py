"""``table`` (reproduction): every row of a paper's published table for one benchmark and buffer
size (:mod:`xder_cli.runs.published`: the X-DER paper's Table 1, the DER paper's Table 2 on
``seq-cifar10``; on the DER paper's benchmarks whose figures are not transcribed, ``seq-mnist``,
``seq-tinyimg``, ``perm-mnist``, ``rot-mnist`` and ``mnist-360``, the rows its ``paper`` preset
holds there), each entry with its default preset (a variant, e.g. ``xder-rpc``, with its preset
entry, ``paper:xder-rpc``), over the seeds; methods without a buffer train once (their run
directories, ``<entry>-s<seed>``, carry no buffer size, so tables of several buffer sizes in one
folder share them). ``table.md`` / ``table.csv``: per entry our FAA and FF, the published value,
the difference and whether it exceeds two standard errors (:func:`xder_eval.compare_to_published`),
then the papers' claims about the table (``papers/claims.toml``, e.g. "X-DER's FAA is above
DER++'s"), each checked on our rows as holds / does not hold / not separated
(:mod:`xder_cli.runs.claims`). On a protocol other than ``paper`` (``laptop``) the table is a
quick one: the published values are shown for orientation only and no difference with them is
judged; the claims are checked all the same. A Domain-IL or general benchmark
(:func:`xder_data.benchmark_scenario`) has no Task-IL column, and ``table.md`` says why in one line
(:func:`no_task_il_line`). A benchmark with no published results at all
(``seq-digits``) trains and tabulates every method of the X-DER paper's Table 1
(:func:`xder_cli.runs.published.xder_table_methods`: ``joint``, ``sgd``, ``lwf_mc``, ``er``,
``gdumb``, ``er_ace``, ``rpc``, ``bic``, ``icarl``, ``lucir``, ``der``, ``derpp``, ``xder``; not
the X-DER variants, which are ``paper`` preset entries of the paper's benchmarks only), ours alone.

Any paper's methods on any benchmark (the rows: :mod:`~xder_cli.runs.experiments.table_rows`):
``paper="der"`` trains the DER paper's Table 2 methods (``gem``, ``agem``, ``fdr``, ``gss``,
``hal``, ``ewc_on``, ``si``, ``lwf``, ...) on ``seq-digits`` too; and ``methods`` may name any
registered method beside the table's rows. A row shows the benchmark's published value where it
has one at that buffer size, else ``-``; the claims are those about the benchmark's own table,
checked among its rows (none on ``seq-digits``). A method no preset has values of for the
benchmark and buffer size runs with preset ``none`` (the benchmark's protocol and the method's own
defaults), as every run without a preset entry does; the plan's notes and ``table.md`` name those
rows.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TypedDict

from xder_cli.runs.claims import check_table_claims, claims_markdown
from xder_cli.runs.errors import SettingError, option
from xder_cli.runs.experiments.common import (
    OWNED_BY_ALL,
    Common,
    ExperimentOptions,
    PlannedExperiment,
    Summary,
    check_owned,
    describe_faa,
    faa_metrics,
    fmt_stat,
    mean_std,
    not_finished,
    or_nan,
    overrides_label,
    overrides_text,
    run_records,
    with_overrides,
)
from xder_cli.runs.experiments.table_rows import (
    TableEntry,
    plan_table,
    rows_text,
    table_entries,
    table_paper,
)
from xder_cli.runs.published import (
    XDER_TABLE,
    benchmark_paper,
    paper_methods,
    paper_name,
    paper_title,
    published_at,
    published_benchmarks,
)
from xder_cli.runs.records import Outcome, Results
from xder_cli.runs.scheduler import PlannedRun
from xder_cli.runs.settings import Notify, ignore
from xder_data import DEFAULT_PROTOCOL, benchmark_scenario
from xder_eval import PublishedResult, compare_to_published
from xder_eval.plots import new_figure, save_figure
from xder_methods import SCENARIO_ACCURACY, Scenario, reports_task_il

__all__ = [
    "TABLE_CSV",
    "TABLE_CSV_COLUMNS",
    "TABLE_MD",
    "Table",
    "TableEntry",
    "no_task_il_line",
    "plan_table",
    "plot_table",
    "summarize_table",
    "table_csv",
    "table_entries",
    "table_markdown",
    "table_metrics",
    "table_paper",
]

TABLE_MD, TABLE_CSV = "table.md", "table.csv"
PLOT = "table.png"


TABLE_MODES = ("judged", "orientation", "ours only")
TWO_SE_RULE = (
    "> 2 SE: whether |Δ| exceeds two standard errors of the difference, SE = σ·√(1/n + 1/n_p), with σ "
    "the published std where the paper gives one, else our sample std; n our seeds; n_p the paper's "
    "run count where it states one, else the published value counts as exact (1/n_p left out); "
    "- where undefined (one seed of ours and no published std)"
)
METRICS = ("faa", "ff", "task_il")
"""The table's metrics: Class-IL FAA and FF, and Task-IL FAA (the DER paper prints both settings)."""
_LABELS = {"faa": "FAA", "ff": "FF", "task_il": "Task-IL"}

TABLE_CSV_COLUMNS = (
    "entry",
    "method",
    "row",
    "preset",
    "buffer_size",
    "n",
    "seeds",
    *(
        f"{metric}_{part}"
        for metric in METRICS
        for part in (
            "mean",
            "std",
            "published",
            "published_std",
            "difference",
            "standard_error",
            "sigma_from",
            "exceeds_two_se",
        )
    ),
    "published_seeds",
    "source",
    "mode",
    "overrides",
    "wall_time_s_mean",
)
"""The header of ``table.csv``: one line per entry (empty cells where a value is undefined)."""


def no_task_il_line(benchmark: str, scenario: Scenario) -> str | None:
    """The one line a table of ``benchmark`` gives for having no Task-IL column (None where it has
    one): a Domain-IL benchmark's tasks all hold the same classes, a general stream is one task."""
    if reports_task_il(scenario):
        return None
    if scenario == "domain-il":
        why = "every task holds the same classes, so a task's own classes are all of them"
        faa = "its Domain-IL accuracy"
    else:
        why = "one stream without task boundaries, a single task to the learner"
        faa = "the accuracy over every class at the stream's end"
    return f"No Task-IL column: {benchmark} is {scenario} ({why}); FAA is {faa}."


def table_metrics(results: Results | None) -> dict[str, float | None]:
    """``faa``, ``ff`` (of the accuracy the benchmark's scenario reports: the columns'; None for a
    run that reports no such accuracy, PNN's Task-IL run on a Class-IL table), ``task_il`` (the
    Task-IL FAA) and ``wall_time_s`` (the run's training time, resumed parts summed) of a
    results.json (None where it has none)."""
    if results is None:
        return faa_metrics(None) | {"task_il": None, "wall_time_s": None}
    return {
        "faa": results.get("faa"),
        "ff": results.get("ff"),
        "task_il": results.get("task_il_faa"),
        "wall_time_s": results.get("wall_time_s"),
    }


class MetricCell(TypedDict):
    """One metric of a table's row (:func:`summarize_table`): ours over the seeds, the published
    value where there is one, and the 2-SE judgement where the table is judged."""

    mean: float | None
    std: float | None
    n: int
    values: list[float]
    published: float | None
    published_std: float | None
    difference: float | None
    standard_error: float | None
    sigma_from: str | None
    exceeds_two_se: bool | None


def _metric_cell(
    values: Sequence[float], published: PublishedResult | None, metric: str, judged: bool
) -> MetricCell:
    """Ours over seeds for one metric; the published value where there is one; the difference
    and the 2-SE judgement (:func:`xder_eval.compare_to_published`) when ``judged``."""
    mean, std = mean_std(values)
    cell: MetricCell = {
        "mean": mean,
        "std": std,
        "n": len(values),
        "values": list(values),
        "published": None,
        "published_std": None,
        "difference": None,
        "standard_error": None,
        "sigma_from": None,
        "exceeds_two_se": None,
    }
    value = None if published is None else getattr(published, metric)
    if published is None or value is None:
        return cell
    cell["published"], cell["published_std"] = value, getattr(published, f"{metric}_std")
    if judged:
        c = compare_to_published(
            values, value, published_std=cell["published_std"], published_seeds=published.seeds
        )
        cell["difference"], cell["standard_error"] = c.difference, c.standard_error
        cell["sigma_from"], cell["exceeds_two_se"] = c.sigma_from, c.exceeds_two_se
    return cell


def summarize_table(
    runs: Sequence[PlannedRun],
    outcomes: dict[str, Outcome],
    root: Path,
    common: Common,
    *,
    entries: Sequence[TableEntry],
    buffer_size: int,
    paper: str = XDER_TABLE,
) -> Summary:
    """experiment.json of ``table``: per entry our FAA and FF (mean, std over the finished seeds),
    the published values (None for a row the benchmark's published table lacks), the differences
    and their 2-SE judgement, the papers' claims about the benchmark's table checked on our rows
    (:func:`xder_cli.runs.claims.check_table_claims`, whatever the mode: they compare our rows with
    each other; none on a benchmark no claim is about), and every run. ``paper``: whose table's
    methods the rows are (:func:`table_paper`; ``paper`` and ``paper_name`` in the summary).

    ``mode``: ``judged`` (paper protocol, published values), ``orientation`` (another protocol:
    published values shown, nothing judged) or ``ours only`` (no row has a published value).
    """
    records = run_records(runs, outcomes, root, table_metrics)
    published = [e.published for e in entries if e.published is not None]
    if not published:
        mode = "ours only"
    else:
        mode = "judged" if common["protocol"] == DEFAULT_PROTOCOL else "orientation"
    presets = {run.tags["entry"]: run.config["run"]["preset"] for run in runs}
    rows = []
    per_seed: dict[str, dict[str, list[float]]] = {metric: {} for metric in METRICS}
    # the claims are about the published table's rows (all of them, even where --methods trains some
    # or adds others); on a benchmark with nothing published at this buffer size, about ours
    table_rows = [p.entry for p in published_at(common["benchmark"], buffer_size)] or [
        e.name for e in entries
    ]
    for entry in entries:
        chosen = [r for r in records if r["entry"] == entry.name]
        done = [r for r in chosen if r["status"] == "finished"]
        row: dict[str, object] = {
            "entry": entry.name,
            "method": entry.method,
            "row": entry.published.row if entry.published else entry.name,
            "preset": presets.get(entry.name),
            "buffered": entry.buffered,
            "seeds_finished": len(done),
            "seeds": len(chosen),
            "published_seeds": entry.published.seeds if entry.published else None,
            "source": entry.published.source if entry.published else None,
        }
        for metric in METRICS:
            values = [float(r[metric]) for r in done if r.get(metric) is not None]
            row[metric] = _metric_cell(values, entry.published, metric, judged=mode == "judged")
            per_seed[metric][entry.name] = values
        times = [float(r["wall_time_s"]) for r in done if r["wall_time_s"] is not None]
        row["wall_time_s"] = sum(times) / len(times) if times else None
        rows.append(row)
    scenario = benchmark_scenario(common["benchmark"])
    accuracy = SCENARIO_ACCURACY[scenario]
    task_il = " and Task-IL FAA" if reports_task_il(scenario) else ""
    return {
        **common,
        "buffer_size": buffer_size,
        "paper": paper,
        "paper_name": paper_name(paper),
        "scenario": scenario,
        "mode": mode,
        "sources": list(dict.fromkeys(p.source for p in published)),
        "metric": f"FAA and FF (%, {accuracy}, test){task_il}; published: the paper protocol's",
        "rule": TWO_SE_RULE if mode == "judged" else None,
        "rows": rows,
        "claims": check_table_claims(common["benchmark"], buffer_size, table_rows, per_seed),
        "runs": records,
    }


def _flag(value: bool | None) -> str:
    return "-" if value is None else ("yes" if value else "no")


def _signed(value: float | None) -> str:
    return "-" if value is None else f"{value:+.2f}"


def _minutes(seconds: float | None) -> str:
    """``14 s`` under a minute, else ``12.3 min``; ``-`` without a finished run."""
    if seconds is None:
        return "-"
    return f"{seconds:.0f} s" if seconds < 59.5 else f"{seconds / 60:.1f} min"


def table_markdown(summary: Summary) -> str:
    """``table.md``: one row per entry; which columns depends on the summary's ``mode``."""
    mode, benchmark, protocol = summary["mode"], summary["benchmark"], summary["protocol"]
    scenario = summary.get("scenario", "class-il")
    metrics = [m for m in METRICS if m != "task_il" or reports_task_il(scenario)]
    on = benchmark if protocol == DEFAULT_PROTOCOL else f"{benchmark}, protocol {protocol} (a quick table)"
    seeds = ", ".join(map(str, summary["seeds"]))
    task_il = " and the Task-IL FAA" if "task_il" in metrics else ""
    accuracy = SCENARIO_ACCURACY[scenario]
    lines = [
        f"# Table: {on}, buffer {summary['buffer_size']}",
        "",
        f"Ours: final average accuracy FAA and final forgetting FF ({accuracy}, test split, %){task_il}, "
        f"mean ± sample std over the finished seeds of {seeds} (n); each method with its preset (the preset "
        "column); one run: the mean wall time of a finished run (training and evaluation, resumed parts "
        "summed).",
    ]
    no_task_il = no_task_il_line(benchmark, scenario)
    if no_task_il:
        lines.append(no_task_il)
    sources = "; ".join(summary["sources"])
    rows = summary["rows"]
    paper = summary.get("paper", XDER_TABLE)
    of_paper = set(paper_methods(paper)) | {p.entry for p in published_at(benchmark, summary["buffer_size"])}
    of_paper |= {e.name for e in table_entries(benchmark, summary["buffer_size"], protocol, paper=paper)}
    if benchmark_paper(benchmark) != paper or any(r["entry"] not in of_paper for r in rows):
        named = ", ".join(r["entry"] for r in rows if r["entry"] not in of_paper)
        lines.append(
            f"Rows: the methods of the {paper_name(paper)}" + (f", and {named}" if named else "") + "."
        )
    if mode == "ours only":
        at = f" at buffer {summary['buffer_size']}" if benchmark in published_benchmarks() else ""
        own = benchmark_paper(benchmark)  # a paper's benchmark whose figures are not transcribed
        why = f" (the {paper_title(own)}'s are not transcribed)" if own and not at else ""
        lines.append(f"No published results for {benchmark}{at}{why}: ours alone.")
    elif mode == "orientation":
        lines.append(
            f"Published: {sources}, on the paper protocol: shown for orientation only, since protocol "
            f"{protocol} differs from the paper's; no difference is judged."
        )
    else:
        lines.append(f"Published: {sources}. Δ = ours − published; {TWO_SE_RULE}.")
    lacking = [r["entry"] for r in rows if r["faa"]["published"] is None]
    if mode != "ours only" and lacking:
        lines.append(f"Not in the published table, so - in its columns: {', '.join(lacking)}.")
    defaults = [r["entry"] for r in rows if r["preset"] == "none"]
    if defaults:
        lines.append(
            "Preset none (no preset has values of the method for this benchmark and buffer size): the "
            f"benchmark's protocol and the method's own defaults, for {', '.join(defaults)}."
        )
    # A metric's published columns where the table has published values of it (Task-IL: the DER
    # paper's table only); Δ and the 2-SE judgement on the paper protocol.
    shown = {
        m: mode != "ours only" and (m != "task_il" or any(r[m]["published"] is not None for r in rows))
        for m in metrics
    }
    header = ["method", "preset"]
    for m in metrics:
        header += [_LABELS[m]] + ([f"{_LABELS[m]} published"] if shown[m] else [])
        header += [f"Δ {_LABELS[m]}", "> 2 SE"] if shown[m] and mode == "judged" else []
    header += ["n", "one run"]
    lines += ["", "| " + " | ".join(header) + " |", "|---|---|" + "---:|" * (len(header) - 2)]
    for row in summary["rows"]:
        cells = [row["entry"], row["preset"] or "-"]
        for metric in metrics:
            c = row[metric]
            cells.append(fmt_stat(c["mean"], c["std"]))
            if shown[metric]:
                cells.append(fmt_stat(c["published"], c["published_std"]))
            if shown[metric] and mode == "judged":
                cells += [_signed(c["difference"]), _flag(c["exceeds_two_se"])]
        cells.append(f"{row['seeds_finished']}/{row['seeds']}")
        cells.append(_minutes(row.get("wall_time_s")))
        lines.append("| " + " | ".join(cells) + " |")
    lines += claims_markdown(summary.get("claims", []))
    return "\n".join(with_overrides(lines, summary) + not_finished(summary["runs"])) + "\n"


def _csv_value(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.4f}"
    return str(value)


def table_csv(summary: Summary) -> str:
    """``table.csv`` under :data:`TABLE_CSV_COLUMNS`: numbers to 4 decimals, ``yes``/``no`` for
    the 2-SE judgement, empty where undefined."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(TABLE_CSV_COLUMNS)
    parts: tuple[str, ...] = ("mean", "std", "published", "published_std", "difference")
    parts += ("standard_error", "sigma_from", "exceeds_two_se")
    for row in summary["rows"]:
        line = [row["entry"], row["method"], row["row"], row["preset"], summary["buffer_size"]]
        line += [row["seeds_finished"], ";".join(map(str, summary["seeds"]))]
        line += [row[metric][part] for metric in METRICS for part in parts]
        line += [row["published_seeds"], row["source"], summary["mode"], overrides_text(summary["sets"])]
        line += [row.get("wall_time_s")]
        writer.writerow([_csv_value(v) for v in line])
    return out.getvalue()


def plot_table(summary: Summary, path: Path) -> None:
    """Ours against published, one point per entry: our mean ± std over seeds (vertical bars)
    against the published value (± its std where given), the diagonal where they agree; one panel
    per metric that has published values. With nothing published: our FAA per entry as bars."""
    rows = summary["rows"]
    where = f"{summary['benchmark']} m{summary['buffer_size']}"
    if summary["mode"] == "ours only":
        fig = new_figure(max(5.0, 1.0 + 0.6 * len(rows)), 4)
        ax = fig.add_subplot()
        ax.bar(
            range(len(rows)),
            [or_nan(r["faa"]["mean"]) for r in rows],
            yerr=[or_nan(r["faa"]["std"]) for r in rows],
            capsize=3,
        )
        ax.set_xticks(range(len(rows)), [r["entry"] for r in rows], rotation=45, ha="right")
        ax.set_xlabel("method (table entry)")
        ax.set_ylabel("FAA (%)")
        ax.set_ylim(0, 100)
        ax.grid(axis="y", alpha=0.3)
        ax.set_title(f"{where}: ours (no published results)", fontsize="medium")
        save_figure(fig, path, run=overrides_label(summary))
        return
    metrics = [m for m in METRICS if any(r[m]["published"] is not None for r in rows)]
    fig = new_figure(5.0 * len(metrics), 5.0)
    for i, metric in enumerate(metrics):
        ax = fig.add_subplot(1, len(metrics), i + 1)
        for index, r in enumerate(rows):  # one colour per entry, the same in both panels
            c = r[metric]
            if c["published"] is None:
                continue
            ax.errorbar(
                c["published"],
                or_nan(c["mean"]),
                yerr=or_nan(c["std"]),
                xerr=or_nan(c["published_std"]),
                marker="o",
                capsize=3,
                linestyle="none",
                color=f"C{index % 10}",
            )
            ax.annotate(
                r["entry"],
                (c["published"], or_nan(c["mean"])),
                fontsize="x-small",
                xytext=(4, 4),
                textcoords="offset points",
            )
        ax.plot([0, 100], [0, 100], color="0.6", linestyle="--", linewidth=1)
        ax.set_xlim(0, 100)
        ax.set_ylim(0, 100)
        ax.set_xlabel(f"{_LABELS[metric]} published (%)")
        ax.set_ylabel(f"{_LABELS[metric]} ours (%)")
        ax.grid(alpha=0.3)
    title = f"{where}: ours against published"
    if summary["mode"] == "orientation":
        title += f"\n(protocol {summary['protocol']}: published values for orientation only)"
    fig.suptitle(title, fontsize="medium")
    save_figure(fig, path, run=overrides_label(summary))


class Table:
    """``table`` (an :class:`~xder_cli.runs.experiments.common.Experiment`): every entry of a
    paper's table (``options.paper``: by default the benchmark's published table, else the X-DER
    paper's Table 1) at ``options.buffer_size``, or those of ``options.methods`` (any registered
    method besides), x seed."""

    name = "table"
    options = frozenset({"methods", "buffer_size", "paper"})

    def plan(self, options: ExperimentOptions, common: Common, notify: Notify = ignore) -> PlannedExperiment:
        """Plan every run (see :class:`~xder_cli.runs.experiments.common.Experiment`);
        ``notify`` hears a note when nothing is published (for any row, or for some), when the
        protocol is not the paper's, and naming the rows that run with preset ``none``.

        Raises:
            SettingError: no buffer size, or one of :func:`table_entries`' mistakes.
        """
        sets, protocol, benchmark = options.run_sets(), options.protocol, options.benchmark
        if options.buffer_size is None:
            raise SettingError(
                f"experiment table needs {option('buffer_size')} M, the buffer size of the published table"
            )
        buffer_size = options.buffer_size
        check_owned(
            sets,
            OWNED_BY_ALL | {"method.buffer_size": f"the experiment sets it: use {option('buffer_size')}"},
        )
        paper = table_paper(benchmark, options.paper)
        entries = table_entries(benchmark, buffer_size, protocol, options.methods, paper)
        if not any(e.published for e in entries):
            at = f" at buffer {buffer_size}" if benchmark in published_benchmarks() else ""
            notify(
                f"note: no published results for {benchmark}{at}: training {rows_text(entries, paper)} and "
                "tabulating ours alone"
            )
        else:
            lacking = [e.name for e in entries if e.published is None]
            if lacking:
                notify(
                    f"note: nothing published for {', '.join(lacking)} on {benchmark} at buffer "
                    f"{buffer_size}: ours alone in those rows (- in the published columns)"
                )
            if protocol != DEFAULT_PROTOCOL:
                notify(
                    f"note: protocol {protocol} is not the paper's: a quick table, the published values "
                    "shown for orientation only (no difference judged)"
                )
        runs = plan_table(benchmark, buffer_size, entries, options.seeds, sets, protocol)
        defaults = list(
            dict.fromkeys(str(r.tags["entry"]) for r in runs if r.config["run"]["preset"] == "none")
        )
        if defaults:
            notify(
                f"note: no preset has values of {', '.join(defaults)} for {benchmark} at buffer "
                f"{buffer_size}: preset none, the benchmark's protocol and the method's own defaults"
            )

        return PlannedExperiment(
            runs,
            lambda outcomes, root: summarize_table(
                runs, outcomes, root, common, entries=entries, buffer_size=buffer_size, paper=paper
            ),
            table_markdown,
            plot_table,
            describe_faa,
            plot_file=PLOT,
            markdown_file=TABLE_MD,
            extra_files=((TABLE_CSV, table_csv),),
            qualifier=f" at buffer {buffer_size}",
        )
