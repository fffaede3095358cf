"""Published results shipped as data: ``papers/published.toml`` (the folder of what the papers
published and claimed, beside ``presets/``).

The file holds the X-DER paper's Table 1 (every row and column, JT and FT included) and the DER
paper's Table 2 on Seq-CIFAR-10 (Class-IL and Task-IL FAA); the DER paper's other benchmarks have
sections that name their source and hold no figure yet (:func:`benchmark_paper` is the DER paper's,
:func:`published_benchmarks` leaves them out). Its header comment gives the layout::

    [sources.x-der]
    paper = "X-DER paper (Boschini et al., ...)"
    table = "Table 1"                       # seeds = N where the paper states its run count

    [seq-cifar100]
    source = "x-der"
    sgd = { row = "FT (lower bound)", faa = 9.43, ff = 89.82 }         # no buffer: every column

    [seq-cifar100.m500]
    xder-rpc = { row = "X-DER w/ RPC future heads", method = "xder", faa = 48.53, ff = 26.94 }

Each entry becomes an :class:`xder_eval.PublishedResult`. ``xder-run experiment table`` trains
a benchmark's table at one buffer size and sets it beside these; ``xder-run report`` shows the
published value beside each group of runs that matches an entry.
"""

from __future__ import annotations

import functools
import tomllib
from importlib import resources
from typing import Any

from xder_cli.runs.errors import SettingError, option
from xder_eval import ANALYSIS_METRICS, PublishedAnalysis, PublishedResult

__all__ = [
    "PUBLISHED_ANALYSES_FILE",
    "PUBLISHED_FILE",
    "XDER_TABLE",
    "benchmark_paper",
    "paper_methods",
    "paper_name",
    "paper_title",
    "published_analyses",
    "published_at",
    "published_benchmarks",
    "published_buffer_sizes",
    "published_results",
    "published_table",
    "table_papers",
    "xder_table_methods",
]

PAPERS = "papers"
"""The folder of ``xder_cli.runs`` that holds what the papers published and claimed."""
PUBLISHED_FILE = "published.toml"
PUBLISHED_ANALYSES_FILE = "published_analyses.toml"
XDER_TABLE = "x-der"
"""The source of the X-DER paper's Table 1: its methods make the table of a benchmark that has no
published results (:func:`xder_table_methods`)."""

_SOURCE_KEYS = {"paper", "table", "seeds"}
_ENTRY_KEYS = {"row", "method", "faa", "ff", "faa_std", "ff_std", "task_il", "task_il_std", "seeds", "source"}


def _number(value: Any, where: str, *, optional: bool = True) -> float | None:
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"{PUBLISHED_FILE}: {where} must be a number, got {value!r}")
    return float(value)


def _seeds(value: Any, where: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{PUBLISHED_FILE}: {where}.seeds must be a positive integer, got {value!r}")
    return value


def _parse(data: dict[str, Any]) -> tuple[dict[str, tuple[str, int | None]], tuple[PublishedResult, ...]]:
    """The sources (name -> (text, seeds)) and every entry, in file order; raises ValueError on a
    malformed file (shipped data: a bug, caught by the tests)."""
    sources: dict[str, tuple[str, int | None]] = {}
    for name, raw in data.get("sources", {}).items():
        unknown = set(raw) - _SOURCE_KEYS
        if unknown or not {"paper", "table"} <= set(raw):
            raise ValueError(f"{PUBLISHED_FILE}: sources.{name} needs paper and table (and at most seeds)")
        sources[name] = (f"{raw['paper']}, {raw['table']}", _seeds(raw.get("seeds"), f"sources.{name}"))

    results: list[PublishedResult] = []

    def entry(benchmark: str, buffer_size: int | None, name: str, raw: Any, default_source: str) -> None:
        where = f"{benchmark}" + (f".m{buffer_size}" if buffer_size is not None else "") + f".{name}"
        if not isinstance(raw, dict) or set(raw) - _ENTRY_KEYS or "faa" not in raw:
            keys = ", ".join(sorted(_ENTRY_KEYS))
            raise ValueError(f"{PUBLISHED_FILE}: {where} must be a table with faa and keys among {keys}")
        source = raw.get("source", default_source)
        if source not in sources:
            raise ValueError(f"{PUBLISHED_FILE}: {where} names no known source ({source!r})")
        text, seeds = sources[source]
        results.append(
            PublishedResult(
                benchmark=benchmark,
                buffer_size=buffer_size,
                entry=name,
                method=str(raw.get("method", name)),
                faa=float(_number(raw["faa"], f"{where}.faa", optional=False)),  # type: ignore[arg-type]
                ff=_number(raw.get("ff"), f"{where}.ff"),
                faa_std=_number(raw.get("faa_std"), f"{where}.faa_std"),
                ff_std=_number(raw.get("ff_std"), f"{where}.ff_std"),
                task_il=_number(raw.get("task_il"), f"{where}.task_il"),
                task_il_std=_number(raw.get("task_il_std"), f"{where}.task_il_std"),
                seeds=_seeds(raw.get("seeds"), where) or seeds,
                source=text,
                row=str(raw.get("row", name)),
            )
        )

    for benchmark, table in data.items():
        if benchmark == "sources":
            continue
        source = table.get("source")
        if not isinstance(source, str):
            raise ValueError(f"{PUBLISHED_FILE}: [{benchmark}] needs a source")
        for key, raw in table.items():
            if key == "source":
                continue
            if key.startswith("m") and key[1:].isdigit():
                for name, values in raw.items():
                    entry(benchmark, int(key[1:]), name, values, source)
            else:
                entry(benchmark, None, key, raw, source)
    return sources, tuple(results)


@functools.cache
def _load_raw() -> dict[str, Any]:
    return tomllib.loads((resources.files("xder_cli.runs") / PAPERS / PUBLISHED_FILE).read_text())


@functools.cache
def _load() -> tuple[dict[str, tuple[str, int | None]], tuple[PublishedResult, ...]]:
    return _parse(_load_raw())


def published_results() -> tuple[PublishedResult, ...]:
    """Every published entry, in the file's order (per benchmark: the buffer-less rows, then
    each buffer size's rows, in the papers' row order)."""
    return _load()[1]


def published_benchmarks() -> list[str]:
    """The benchmarks that have published results."""
    return list(dict.fromkeys(p.benchmark for p in published_results()))


def published_buffer_sizes(benchmark: str) -> list[int]:
    """The buffer sizes at which ``benchmark`` has a published table (ascending)."""
    sizes = {p.buffer_size for p in published_results() if p.benchmark == benchmark}
    return sorted(size for size in sizes if size is not None)


def published_table(benchmark: str, buffer_size: int) -> list[PublishedResult]:
    """The rows of ``benchmark``'s published table at ``buffer_size``: the buffer-less entries and
    those of that buffer size, in the paper's row order; ``[]`` for a benchmark with no published
    results at all.

    Raises:
        SettingError: the benchmark has published tables, but none at ``buffer_size``.
    """
    if benchmark not in published_benchmarks():
        return []
    sizes = published_buffer_sizes(benchmark)
    if buffer_size not in sizes:
        raise SettingError(
            f"{benchmark} has no published table at buffer size {buffer_size}: the published ones are at "
            f"{', '.join(map(str, sizes))}; pick one with {option('buffer_size')}"
        )
    rows = published_results()
    return [p for p in rows if p.benchmark == benchmark and p.buffer_size in (None, buffer_size)]


def published_at(benchmark: str, buffer_size: int) -> list[PublishedResult]:
    """The published cells of ``benchmark`` at ``buffer_size`` (:func:`published_table`), or ``[]``
    where it has none at that buffer size (never raises)."""
    if buffer_size not in published_buffer_sizes(benchmark):
        return []
    return published_table(benchmark, buffer_size)


def table_papers() -> list[str]:
    """The papers whose tables are shipped, by their source name in ``published.toml``
    (``x-der``, ``der``): ``xder-run experiment table --paper NAME`` takes their methods."""
    return list(_load()[0])


def _source(paper: str) -> tuple[str, int | None]:
    sources = _load()[0]
    if paper not in sources:
        raise SettingError(f"{option('paper')} {paper!r}: no such paper; choose one of {', '.join(sources)}")
    return sources[paper]


def paper_name(paper: str) -> str:
    """A paper's table in words, from its source: ``X-DER paper's Table 1``, ``DER paper's Table 2``.

    Raises:
        SettingError: no shipped table is of ``paper``.
    """
    title = paper_title(paper)  # raises for an unknown paper
    return f"{title}'s {_load_raw()['sources'][paper]['table'].split(',')[0]}"


def paper_title(paper: str) -> str:
    """A paper in words, from its source: ``X-DER paper``, ``DER paper``.

    Raises:
        SettingError: no shipped table is of ``paper``.
    """
    _source(paper)
    return str(_load_raw()["sources"][paper]["paper"].split(" (")[0])


def benchmark_paper(benchmark: str) -> str | None:
    """The paper whose table ``benchmark``'s published results are (its section's ``source``),
    or None for a benchmark with nothing published."""
    section = _load_raw().get(benchmark)
    return str(section["source"]) if isinstance(section, dict) and benchmark != "sources" else None


def paper_methods(paper: str) -> tuple[str, ...]:
    """The registered methods of ``paper``'s table rows, in its order, each once (a variant's row,
    e.g. ``xder-rpc``, counts as its method): the rows ``experiment table`` trains for that paper on
    a benchmark whose published table is not that paper's.

    Raises:
        SettingError: no shipped table is of ``paper``.
    """
    from xder_methods import list_methods

    text = _source(paper)[0]
    registered = set(list_methods())
    methods = [p.method for p in published_results() if p.source == text and p.method in registered]
    return tuple(dict.fromkeys(methods))


def xder_table_methods() -> tuple[str, ...]:
    """The methods of the X-DER paper's Table 1 rows, in its order, each once (its X-DER variants
    are entries of ``xder``): the table trained on a benchmark without published results."""
    return paper_methods(XDER_TABLE)


def _parse_analyses(data: dict[str, Any]) -> tuple[PublishedAnalysis, ...]:
    """Every entry of ``published_analyses.toml`` in file order (layout in its header); raises
    ValueError on a malformed file (shipped data: a bug, caught by the tests)."""
    where_file = PUBLISHED_ANALYSES_FILE
    sources = {}
    for name, raw in data.get("sources", {}).items():
        if set(raw) != {"paper", "table"}:
            raise ValueError(f"{where_file}: sources.{name} needs paper and table (only)")
        sources[name] = f"{raw['paper']}, {raw['table']}"
    out = []
    for benchmark, table in data.items():
        if benchmark == "sources":
            continue
        for key, column in table.items():
            if not (key.startswith("m") and key[1:].isdigit()) or not isinstance(column, dict):
                raise ValueError(f"{where_file}: [{benchmark}.{key}] is not a buffer column (m<size>)")
            source = column.get("source")
            if source not in sources:
                raise ValueError(f"{where_file}: [{benchmark}.{key}] names no known source ({source!r})")
            for name, raw in column.items():
                if name == "source":
                    continue
                where = f"{benchmark}.{key}.{name}"
                figures = {k: v for k, v in raw.items() if k not in ("row", "method")}
                if not figures or set(figures) - set(ANALYSIS_METRICS):
                    known = ", ".join(ANALYSIS_METRICS)
                    raise ValueError(f"{where_file}: {where} needs figures among {known} (and row, method)")
                values = {k: float(_number(v, f"{where}.{k}", optional=False)) for k, v in figures.items()}  # type: ignore[arg-type]
                out.append(
                    PublishedAnalysis(
                        benchmark=benchmark,
                        buffer_size=int(key[1:]),
                        entry=name,
                        method=str(raw.get("method", name)),
                        values=values,
                        source=sources[source],
                        row=str(raw.get("row", name)),
                    )
                )
    return tuple(out)


@functools.cache
def published_analyses() -> tuple[PublishedAnalysis, ...]:
    """The papers' analysis figures (``papers/published_analyses.toml``: the X-DER paper's
    secondary-information table, SS-ERR and SS-NLL on Split CIFAR-100), in the file's order."""
    text = (resources.files("xder_cli.runs") / PAPERS / PUBLISHED_ANALYSES_FILE).read_text()
    return _parse_analyses(tomllib.loads(text))
