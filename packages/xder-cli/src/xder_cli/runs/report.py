"""The report over run directories (``xder-run report``, :func:`write_report`): tables (mean ±
std over seeds) and plots, the papers' published values beside them, and the paper's analyses of
analysed runs.

Reading is here; grouping, statistics, tables and plots are :mod:`xder_eval.report`. A run that
cannot be used (no results.json, unreadable files, ``complete: false``) is listed, never fatal;
only a path that does not exist, or a folder holding no run directory, is an error. Each run's
``scenario`` (:data:`xder_methods.Scenario`) says what its table shows (:func:`report_scenarios`):
runs of one scenario make one table, named by its accuracy (Class-IL, Domain-IL, a general
stream's Accuracy, with no FF), runs of several make one table each; a benchmark whose runs name
two scenarios, or Task-IL asked of a scenario without it, is an error. The
published results shipped beside the presets (:mod:`xder_cli.runs.published`) are passed in, so
each group of runs on a paper protocol that matches a published entry shows its published FAA
(FF).

Runs analysed with ``xder-run analyze`` (``analysis/analysis.json``,
:func:`xder_cli.runs.run_analysis.read_analysis`) add the paper's analyses per column
(:mod:`xder_eval.analysis_report`): SS-ERR, SS-NLL, ECE and the newest-head share over seeds, the
paper's figures beside them and the direction of its orderings, and the analysis claims of
``claims.toml`` checked on them (:func:`xder_cli.runs.claims.check_table_claims`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypedDict

from xder_cli.runs import rundir
from xder_cli.runs.claims import check_table_claims, claims_markdown
from xder_cli.runs.defaults import REPORT_OUT as DEFAULT_REPORT_OUT
from xder_cli.runs.errors import RunDirError, RunError, option
from xder_cli.runs.published import published_analyses, published_results
from xder_cli.runs.records import Config, Settings
from xder_cli.runs.run_analysis import read_analysis
from xder_cli.runs.settings import NOT_DEFINING, run_overrides, settings_text
from xder_data import DataError
from xder_eval import (
    ANALYSIS_METRICS,
    GroupKey,
    RepeatedSeed,
    Report,
    RunRecord,
    ScenarioFacts,
    analyses_dict,
    analyses_markdown,
    analysis_rows,
    base_benchmark,
    build_report,
    file_token,
    group_title,
    plot_analyses,
    plot_report_curves,
    plot_report_matrix,
    report_csv,
    report_dict,
    report_markdown,
)
from xder_methods import SCENARIO_ACCURACY, SCENARIOS, MethodError, reports_class_il, reports_task_il
from xder_models import UnknownBackboneError

__all__ = [
    "DEFAULT_REPORT_OUT",
    "WrittenReport",
    "find_run_dirs",
    "group_overrides",
    "read_run",
    "report_analyses",
    "report_scenarios",
    "write_report",
]

TABLE_MD, TABLE_CSV, REPORT_JSON = "table.md", "table.csv", "report.json"
ANALYSES_MD = "analyses.md"


def _is_run_dir(path: Path) -> bool:
    return (path / rundir.CONFIG).is_file() or (path / rundir.RESULTS).is_file()


def _run_folders() -> tuple[str, ...]:
    from xder_cli.runs.experiments.common import RUNS
    from xder_cli.runs.sweep import TRIALS

    return (TRIALS, RUNS)


def find_run_dirs(paths: list[str]) -> list[Path]:
    """The run directories named by ``paths``: each is a run directory (it holds config.toml or
    results.json) or a folder whose direct subfolders are scanned for run directories (a sweep's
    or an experiment's folder: its ``trials/`` or ``runs/``). Order is kept (subfolders by name);
    a run named twice is read once.

    Raises:
        RunDirError: a path that does not exist, is not a folder, or holds no run directory.
    """
    found: list[Path] = []
    seen: set[Path] = set()
    for text in paths:
        path = Path(text)
        if not path.exists():
            raise RunDirError(f"{path}: no such directory; give run directories or the folder holding them")
        if not path.is_dir():
            raise RunDirError(f"{path}: not a directory; give run directories or the folder holding them")
        if _is_run_dir(path):
            candidates = [path]
        else:
            candidates = sorted(p for p in path.iterdir() if p.is_dir() and _is_run_dir(p))
            for inner in _run_folders():  # a sweep's folder, an experiment's
                if not candidates and (path / inner).is_dir():
                    candidates = sorted(p for p in (path / inner).iterdir() if p.is_dir() and _is_run_dir(p))
            if not candidates:
                raise RunDirError(
                    f"{path}: not a run directory and none in it (no {rundir.CONFIG} here or one level "
                    "down); give folders that xder-run train created, or the folder holding them"
                )
        for candidate in candidates:
            key = candidate.resolve()
            if key not in seen:
                seen.add(key)
                found.append(candidate)
    return found


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


def read_run(path: Path) -> RunRecord:
    """Parse a run directory's config.toml and results.json; what cannot be read becomes the
    record's ``error`` (the report lists it) instead of an exception."""
    config: Config | None = None
    results: Any = None
    errors: list[str] = []
    config_path = path / rundir.CONFIG
    if not config_path.is_file():
        errors.append(f"no {rundir.CONFIG}")
    else:
        try:
            config = rundir.read_config(config_path)
        except RunDirError as error:
            errors.append(f"unreadable {rundir.CONFIG}: {_first_line(error.__cause__ or error)}")
    try:
        results = rundir.read_results(path)
    except rundir.ResultsUnreadableError as error:
        errors.append(str(error))
    return RunRecord(str(path), config, results, "; ".join(errors) or None)


def report_analyses(
    report: Report, analyses: dict[str, dict[str, Any]], out: Path
) -> tuple[str, list[dict[str, Any]], list[str]]:
    """The analyses section of a report, per column with analysed runs: its Markdown (figures
    beside the paper's, the paper's orderings, the analysis claims), its JSON and the plots
    written to ``out`` (``analyses_<benchmark>_m<buffer>.png``); empty without analysed runs."""
    markdown, payload, plots = "", [], []
    published = published_analyses()
    for column in report.columns:
        rows = analysis_rows(report, column, analyses, published)
        if not rows:
            continue
        values = {m: {r.entry: list(r.stats[m].values) for r in rows} for m in ANALYSIS_METRICS}
        entries = [r.entry for r in rows]
        records = check_table_claims(
            base_benchmark(column.benchmark), column.buffer_size, entries, values, ANALYSIS_METRICS
        )
        name = f"analyses_{file_token(column.benchmark)}_m{column.buffer_size}.png"
        plot_analyses(column, rows, out / name)
        plots.append(name)
        section = analyses_markdown(column, rows)
        claims = claims_markdown(records)
        if claims:
            claims[1] = "### The paper's claims on its analyses, checked on these runs"
        markdown += "\n" + section + "\n".join(claims) + ("\n" if claims else "")
        payload.append(analyses_dict(column, rows) | {"claims": records, "plot": name})
    return markdown, payload, plots


def report_scenarios() -> dict[str, ScenarioFacts]:
    """What a report shows of each scenario (:data:`xder_methods.SCENARIOS`, in their order): its
    own accuracy's name (:data:`xder_methods.SCENARIO_ACCURACY`), the accuracies it reports
    (:func:`xder_methods.reports_class_il`, :func:`~xder_methods.reports_task_il`), and
    forgetting but in a general stream, one task to the learner."""
    facts: dict[str, ScenarioFacts] = {}
    for scenario in SCENARIOS:
        facts[scenario] = ScenarioFacts(
            SCENARIO_ACCURACY[scenario],
            class_il=reports_class_il(scenario),
            task_il=reports_task_il(scenario),
            forgetting=scenario != "general",  # one task to the learner: nothing to forget
        )
    return facts


def _check_scenarios(report: Report, task_il: bool) -> None:
    """Refuse a report that would mix scenarios in a column, or show Task-IL where it means nothing."""
    by_benchmark: dict[str, list[str]] = {}
    for column in report.columns:
        found = by_benchmark.setdefault(column.benchmark, [])
        if column.scenario not in found:
            found.append(column.scenario)
    for benchmark, scenarios in by_benchmark.items():
        if len(scenarios) > 1:
            raise RunDirError(
                f"the runs on {benchmark} name {len(scenarios)} scenarios ({', '.join(scenarios)}): one "
                "benchmark, two problems; report each scenario's runs apart"
            )
    lacking = report.without_task_il() if task_il else ()
    if lacking:
        names = ", ".join(dict.fromkeys(f"{c.benchmark} ({c.scenario})" for c in lacking))
        raise RunDirError(
            f"{option('task_il')}: no Task-IL accuracy in {names}, where a task's classes are all the "
            f"classes; report without {option('task_il')}, or without those runs"
        )


class GroupOverrides(TypedDict):
    """A group trained with settings its preset and protocol do not give (:func:`group_overrides`):
    its :class:`~xder_eval.GroupKey`'s fields and those settings (dotted keys)."""

    benchmark: str
    buffer_size: int
    method: str
    preset: str
    settings: str
    buffered: bool
    scenario: str
    overrides: Settings


def group_overrides(
    groups: Any, configs: Mapping[str, Mapping[str, Mapping[str, Any]] | None]
) -> list[GroupOverrides]:
    """Per group whose runs differ from their preset and protocol
    (:func:`xder_cli.runs.settings.run_overrides`
    of its first run): the group and those settings; groups whose method or benchmark is unknown
    here (a plugin not loaded) are left out."""
    out: list[GroupOverrides] = []
    for group in groups:
        config = configs.get(group.paths[0])
        if config is None:
            continue
        try:
            found = run_overrides(config)
        except (RunError, DataError, MethodError, UnknownBackboneError, KeyError):
            continue
        if found:
            k: GroupKey = group.key
            out.append(
                {
                    "benchmark": k.benchmark,
                    "buffer_size": k.buffer_size,
                    "method": k.method,
                    "preset": k.preset,
                    "settings": k.settings,
                    "buffered": k.buffered,
                    "scenario": k.scenario,
                    "overrides": found,
                }
            )
    return out


def _override_note(overrides: list[GroupOverrides], key: GroupKey) -> str | None:
    """The line above a group's plot naming its overrides (None without any)."""
    for o in overrides:
        if _key_of(o) == key:
            return "with overrides: " + settings_text(o["overrides"])
    return None


def _key_of(override: GroupOverrides) -> GroupKey:
    """The group an entry of :func:`group_overrides` belongs to."""
    o = override
    return GroupKey(
        benchmark=o["benchmark"],
        buffer_size=o["buffer_size"],
        method=o["method"],
        preset=o["preset"],
        settings=o["settings"],
        buffered=o["buffered"],
        scenario=o["scenario"],
    )


def overrides_markdown(overrides: list[GroupOverrides]) -> str:
    """The report's note on groups trained with overrides (empty when there are none)."""
    if not overrides:
        return ""
    lines = [
        "",
        "Trained with settings their preset and protocol do not give (`--set`, `--epochs`, ...):",
        "",
    ]
    for o in overrides:
        values = settings_text(o["overrides"])
        buffer = f"buffer {o['buffer_size']}" if o["buffered"] else "no buffer"
        lines.append(f"- {o['method']} ({o['preset']}) on {o['benchmark']}, {buffer}: `{values}`")
    return "\n".join(lines) + "\n"


@dataclass(frozen=True)
class WrittenReport:
    """What :func:`write_report` wrote: the tables as text, the counts its last line gives, and
    the seeds run more than once (``repeated``: each with its group in words, the run that
    counted and those set aside)."""

    markdown: str
    analyses_markdown: str
    out: Path
    files: list[str]
    plots: list[str]
    runs: int
    groups: int
    analysed: int
    repeated: tuple[tuple[str, RepeatedSeed], ...] = ()


_PROBLEM_WORDS = {"missing": "without results.json", "unreadable": "unreadable", "incomplete": "incomplete"}


def write_report(paths: Sequence[str | Path], out: str | Path, *, task_il: bool = False) -> WrittenReport:
    """The report of the run directories ``paths`` (:func:`find_run_dirs`) into ``out``: ``table.md``,
    ``table.csv``, ``report.json``, ``curves_<benchmark>_m<buffer>.png`` per column and
    ``matrix_<benchmark>_m<buffer>_<method>.png`` per group (the method's row name when it has
    several rows; buffer 0 for buffer-less methods), and for analysed runs ``analyses.md`` and
    their plots. The tables show each scenario's own accuracy, one table per scenario
    (:func:`report_scenarios`), or Task-IL with ``task_il``. A group matching a published entry
    shows the published value beside its own. Runs are grouped by the settings that define them
    (:data:`NOT_DEFINING` never tells runs apart).

    Raises:
        RunDirError: a path that names no run directory, run directories none of which is
            complete (nothing is written then), runs on one benchmark that name two scenarios,
            ``task_il`` with runs of a scenario that has no Task-IL (nothing written either), or an
            output folder that cannot be made.
    """
    run_dirs = find_run_dirs([str(p) for p in paths])
    records = [read_run(path) for path in run_dirs]
    analysed = {str(path): found for path in run_dirs if (found := read_analysis(path)) is not None}
    report = build_report(records, published_results(), ignore=NOT_DEFINING, scenarios=report_scenarios())
    if not report.groups:
        kinds = Counter(problem.kind for problem in report.problems if problem.path)
        why = ", ".join(f"{count} {_PROBLEM_WORDS.get(kind, kind)}" for kind, count in sorted(kinds.items()))
        raise RunDirError(
            f"no complete run to report among the {len(records)} run directories read ({why}): nothing "
            f"written; finish them first ({option('train_run')} {option('resume')} RUN_DIR continues one)"
        )
    _check_scenarios(report, task_il)
    out = Path(out)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise RunDirError(f"cannot create the output folder {out}: {error.strerror}") from error

    overrides = group_overrides(report.groups, {r.path: r.config for r in records})
    heading = (
        f"**{len(overrides)} of the groups below were trained with overrides** (named after the table): "
        "not their protocol's own settings.\n\n"
        if overrides
        else ""
    )
    markdown = heading + report_markdown(report, task_il=task_il) + overrides_markdown(overrides)
    rundir.atomic_write_bytes(out / TABLE_MD, markdown.encode())
    rundir.atomic_write_bytes(out / TABLE_CSV, report_csv(report).encode())
    analyses_md, analyses_payload, plots = report_analyses(report, analysed, out)
    if analyses_md:
        rundir.atomic_write_bytes(out / ANALYSES_MD, analyses_md.lstrip("\n").encode())
    for column in report.columns:
        name = f"curves_{file_token(column.benchmark)}_m{column.buffer_size}.png"
        shown = [o for o in overrides if column.holds(_key_of(o))]
        note = "some rows with overrides (see table.md)" if shown else None
        plot_report_curves(report, column, out / name, task_il=task_il, note=note)
        plots.append(name)
    for group in report.groups:
        k = group.key
        name = (
            f"matrix_{file_token(k.benchmark)}_m{k.buffer_size}_{file_token(report.row_of(group).name)}.png"
        )
        plot_report_matrix(report, group, out / name, task_il=task_il, note=_override_note(overrides, k))
        plots.append(name)
    payload = report_dict(report, task_il=task_il)
    written = [TABLE_MD, TABLE_CSV, *([ANALYSES_MD] if analyses_md else []), REPORT_JSON]
    payload["files"] = [*written, *plots]
    payload["overrides"] = overrides
    payload["analyses"] = analyses_payload
    rundir.write_json(out / REPORT_JSON, payload)
    repeated = tuple((group_title(g.key), r) for g in report.groups for r in g.repeated)
    return WrittenReport(
        markdown, analyses_md, out, written, plots, len(records), len(report.groups), len(analysed), repeated
    )
