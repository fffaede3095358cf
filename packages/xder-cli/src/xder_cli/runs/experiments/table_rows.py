"""The rows of ``experiment table`` (:mod:`xder_cli.runs.experiments.table`): which methods a
table trains (:func:`table_paper`, :func:`table_entries`: a paper's table's rows, or any registered
method), each with the benchmark's published value where it has one, and every (row, seed) planned
as a run (:func:`plan_table`) with its method's default preset, or a variant's preset entry.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from xder_cli.runs.errors import SettingError, option
from xder_cli.runs.experiments.common import run_config
from xder_cli.runs.presets import DEFAULT_ORDER, list_presets, preset_entries, preset_entry
from xder_cli.runs.published import (
    XDER_TABLE,
    benchmark_paper,
    paper_methods,
    paper_name,
    paper_title,
    published_at,
    published_table,
)
from xder_cli.runs.scheduler import PlannedRun
from xder_cli.runs.settings import takes_buffer
from xder_data import DEFAULT_PROTOCOL, Scenario, benchmark_scenario, list_benchmarks
from xder_eval import PublishedResult
from xder_methods import MethodBase, list_methods, method_class

__all__ = ["TableEntry", "plan_table", "rows_text", "table_entries", "table_paper"]


@dataclass(frozen=True)
class TableEntry:
    """One row of ``experiment table``: a method, or a variant of one (an entry of a preset).

    Attributes:
        name: the entry's name (``derpp``, ``xder-rpc``): its run directories' prefix.
        method: the registered method it runs.
        preset: the preset its runs name (``paper:xder-rpc`` for a variant); None: the method's
            default preset (tuned, else paper, where it has an entry, else none).
        buffered: whether the method keeps a buffer (else it trains once for every buffer size).
        published: its published cell; None where nothing is published.
    """

    name: str
    method: str
    preset: str | None
    buffered: bool
    published: PublishedResult | None = None

    def run_name(self, buffer_size: int, seed: int) -> str:
        """``<entry>-m<buffer>-s<seed>``; ``<entry>-s<seed>`` for a method without a buffer."""
        return f"{self.name}-m{buffer_size}-s{seed}" if self.buffered else f"{self.name}-s{seed}"


def _variant_preset(benchmark: str, buffer_size: int, entry: str, method: str, protocol: str) -> str:
    """``NAME:ENTRY`` of the first preset (tuned, then paper) holding the variant ``entry``."""
    for name in DEFAULT_ORDER:
        if name not in list_presets():
            continue
        try:
            preset_entry(name, benchmark, buffer_size, entry, method=method, protocol=protocol)
        except SettingError:
            continue
        return f"{name}:{entry}"
    on = benchmark if protocol == DEFAULT_PROTOCOL else f"{benchmark} (protocol {protocol})"
    raise SettingError(
        f"no preset holds the variant {entry!r} for {on} at buffer {buffer_size}: "
        f"leave it out of {option('methods')}"
    )


def _preset_rows(benchmark: str, buffer_size: int, paper: str) -> list[tuple[str, str]]:
    """The rows of ``paper``'s table on ``benchmark``, one of its benchmarks whose figures are not
    transcribed (``published.toml`` names its source but holds no figure): the entries of the
    ``paper`` preset's table of ``benchmark`` (its paper protocol) without a buffer and at
    ``buffer_size``, the methods the authors ran there; the paper's row order first
    (:func:`~xder_cli.runs.published.paper_methods`), then the preset's.

    Raises:
        SettingError: the preset has no entry of ``benchmark`` at ``buffer_size``.
    """
    entries = [
        e for e in preset_entries("paper") if (e.benchmark, e.protocol) == (benchmark, DEFAULT_PROTOCOL)
    ]
    sizes = sorted({e.buffer_size for e in entries if e.buffer_size is not None})
    if buffer_size not in sizes:
        at = f"at buffer sizes {', '.join(map(str, sizes))}" if sizes else "at no buffer size"
        raise SettingError(
            f"{benchmark} has no published figures, and the paper preset holds the rows the "
            f"{paper_title(paper)} ran on it {at}: pick one with {option('buffer_size')}"
        )
    order = paper_methods(paper)
    rows = [(e.name, e.method) for e in entries if e.buffer_size in (None, buffer_size)]
    return sorted(rows, key=lambda row: order.index(row[1]) if row[1] in order else len(order))


def table_paper(benchmark: str, paper: str | None = None) -> str:
    """The paper whose table's methods ``experiment table`` trains: ``paper`` where given (a
    source of ``published.toml``, :func:`xder_cli.runs.published.table_papers`), else the paper
    of ``benchmark``'s published table, else the X-DER paper (Table 1).

    Raises:
        SettingError: ``paper`` names no shipped table.
    """
    if paper is not None:
        paper_name(paper)  # raises for a paper with no table
        return paper
    return benchmark_paper(benchmark) or XDER_TABLE


def table_entries(
    benchmark: str,
    buffer_size: int,
    protocol: str = DEFAULT_PROTOCOL,
    methods: Sequence[str] | None = None,
    paper: str | None = None,
) -> list[TableEntry]:
    """The rows ``experiment table`` trains: the rows of a paper's table (:func:`table_paper`), or
    those named in ``methods``; each with the benchmark's published value where it has one at
    ``buffer_size``, else none.

    * On the benchmark's own paper (the default where it has published results): every entry of
      its published table at ``buffer_size`` (:func:`xder_cli.runs.published.published_table`), in
      the paper's order, variants included.
    * On another paper (``paper``, or the X-DER paper's Table 1 where nothing is published): every
      registered method of that paper's table (:func:`xder_cli.runs.published.paper_methods`; not
      its variants, which are preset entries of its own benchmarks) that runs in the benchmark's
      scenario (a method that refuses it, named in ``methods``, refuses in one line), at any
      buffer size.

    ``methods`` picks rows by entry name, and may name any registered method or any entry of the
    benchmark's published table besides: the table's rows come first in its order, the others
    after in the order given.

    Raises:
        SettingError: an unknown benchmark or paper, a buffer size below 1 or, on the benchmark's
            own paper, with no published table; a name in ``methods`` that no method registers and
            no row of the table or the benchmark's published table has; a variant no preset holds
            for the benchmark.
    """
    if benchmark not in list_benchmarks():
        raise SettingError(f"unknown benchmark {benchmark!r}: choose one of {', '.join(list_benchmarks())}")
    if buffer_size < 1:
        raise SettingError(f"{option('buffer_size')} must be >= 1, got {buffer_size}")
    chosen = table_paper(benchmark, paper)
    if chosen == benchmark_paper(benchmark):
        published = published_table(benchmark, buffer_size)  # raises where there is none at that size
        candidates = [(p.entry, p.method) for p in published] or _preset_rows(benchmark, buffer_size, chosen)
    else:  # the paper's methods that run in the benchmark's scenario (a Domain-IL one: no LwF)
        published = published_at(benchmark, buffer_size)
        scenario = benchmark_scenario(benchmark)
        candidates = [(m, m) for m in paper_methods(chosen) if _runs_in(m, scenario)]
    cells = {p.entry: p for p in published}
    kinds = dict(candidates) | {name: p.method for name, p in cells.items() if name not in dict(candidates)}
    registered = list_methods()
    for name in methods or ():
        if name not in kinds and name not in registered:
            rows = ", ".join(name for name, _ in candidates)
            raise SettingError(
                f"{option('methods')}: no method registers {name!r} and the {paper_name(chosen)} has no row "
                f"of that name; its rows are {rows}, and any registered method may be named: "
                f"{', '.join(registered)}"
            )
    names = [name for name, _ in candidates if methods is None or name in methods]
    names += [name for name in methods or () if name not in names]
    entries = []
    for name in names:
        method = kinds.get(name, name)
        preset = None if name == method else _variant_preset(benchmark, buffer_size, name, method, protocol)
        entries.append(TableEntry(name, method, preset, takes_buffer(method), cells.get(name)))
    return entries


def _runs_in(method: str, scenario: Scenario) -> bool:
    """Whether ``method`` runs in ``scenario`` as far as its class says
    (:attr:`xder_methods.MethodBase.refused_scenarios`; a plugin's own class: yes)."""
    cls = method_class(method)
    return not (issubclass(cls, MethodBase) and scenario in cls.refused_scenarios)


def plan_table(
    benchmark: str,
    buffer_size: int,
    entries: Sequence[TableEntry],
    seeds: Sequence[int],
    sets: Mapping[str, Any],
    protocol: str = DEFAULT_PROTOCOL,
) -> list[PlannedRun]:
    """Every (entry, seed) of a table, configured and validated: the entry's preset, the buffer
    size for methods that keep a buffer, then ``sets``."""
    runs = []
    for entry in entries:
        buffer = {"method.buffer_size": buffer_size} if entry.buffered else {}
        for seed in seeds:
            config = run_config(
                entry.method, benchmark, seed, {**buffer, **sets}, protocol, preset=entry.preset
            )
            runs.append(
                PlannedRun(
                    entry.run_name(buffer_size, seed),
                    seed,
                    config,
                    {"entry": entry.name, "method": entry.method},
                )
            )
    return runs


def rows_text(entries: Sequence[TableEntry], paper: str) -> str:
    """The rows in words: ``the DER paper's Table 2 methods (gem, agem) and xder``."""
    own = set(paper_methods(paper))
    ours = [e.name for e in entries if e.name in own]
    others = [e.name for e in entries if e.name not in own]
    text = f"the {paper_name(paper)} methods ({', '.join(ours)})" if ours else ""
    return " and ".join(t for t in (text, ", ".join(others)) if t)
