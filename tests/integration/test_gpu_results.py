"""The GPU runs' results (benchmarks/gpu/results.py): one deterministic archive per run, the index
built from the archives, the queue (benchmarks/gpu/jobs.py) that reads the index to know which
jobs are done (by their results, never by hand), and the figures docs/gpu.md and
docs/performance.md quote, each checked against the index."""

from __future__ import annotations

import importlib
import io
import itertools
import json
import re
import sys
import tarfile
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
GPU = ROOT / "benchmarks" / "gpu"


def load(name: str) -> ModuleType:
    """``jobs`` or ``results`` of benchmarks/gpu, imported as the scripts import each other (their
    folder on the path)."""
    if str(GPU) not in sys.path:
        sys.path.insert(0, str(GPU))
    return importlib.import_module(name)


def job_files(
    *, device: str = "cuda", statuses: tuple[str, ...] = ("ok",), full: dict[str, Any] | None = None
) -> dict[str, bytes]:
    """A job's files as the GPU script writes them: its env, its summary, its full run's figures."""
    phases = {f"phase{i}": {"status": status, "seconds": 1.0} for i, status in enumerate(statuses)}
    files = {
        "env.json": json.dumps({"device": device, "card": "NVIDIA H200"}).encode(),
        "summary.json": json.dumps({"phases": phases}).encode(),
        "phase0.log": b"a log\n",
    }
    if full is not None:
        files["full_run.json"] = json.dumps(full).encode()
    return files


def index_of(jobs: dict[str, dict[str, dict[str, bytes]]]) -> dict[str, Any]:
    """An index of runs (run -> job -> files), as ``results.py`` builds it from archives."""
    results = load("results")
    return {
        "runs": {
            run: {"jobs": {job: results.job_record(files) for job, files in held.items()}}
            for run, held in jobs.items()
        }
    }


# ---------------------------------------------------------------------------------------------
# the queue


def test_the_queue_file_names_each_job_once_with_its_minutes_and_options() -> None:
    jobs = load("jobs").jobs()
    names = [job["name"] for job in jobs]
    assert len(names) == len(set(names))
    for job in jobs:
        assert job["minutes"] > 0
        assert job["what"]
        assert all(isinstance(arg, str) for arg in job["args"])


def test_the_queue_asks_for_modes_the_gpu_script_has() -> None:
    """Each job's bench plan and full-run mode name modes of ``gpu_phases.modes.MODES`` (a typo
    would cost a lent machine's call)."""
    modes = load("gpu_phases.modes").MODES
    for job in load("jobs").jobs():
        args = job["args"]
        asked = []
        for flag, value in itertools.pairwise(args):
            if flag == "--bench-plan":
                asked += [pair.split(":")[1] for pair in value.split(",")]
            elif flag == "--full-run-mode":
                asked.append(value)
        assert all(mode in modes for mode in asked), (job["name"], asked)


def test_a_job_is_done_only_by_a_complete_result_on_a_gpu() -> None:
    jobs = load("jobs")
    job = {"name": "full", "minutes": 9, "args": []}
    assert jobs.done(job, {"runs": {}}) is None
    cut = {"complete": True, "epochs_per_task": 16, "epochs": 50}  # fewer epochs than the protocol's
    index = index_of(
        {
            "cpu-2026-01-01": {"full": job_files(device="cpu")},  # a smoke run on a CPU
            "h200-2026-01-02": {"full": job_files(statuses=("ok", "error"))},  # a phase failed
            "h200-2026-01-03": {"full": job_files(full=cut)},
            "h200-2026-01-04": {"full": job_files(full={**cut, "complete": False, "epochs_per_task": 50})},
            "h200-2026-01-05": {"other": job_files()},  # another job's
            "h200-2026-01-06": {"full": {"env.json": b'{"device": "cuda"}'}},  # no summary
        }
    )
    assert jobs.done(job, index) is None
    assert [run for run, held in index["runs"].items() if held["jobs"].get("other", {}).get("done")] == [
        "h200-2026-01-05"
    ]
    index["runs"].update(
        index_of({"h100-2026-01-07": {"full": job_files(full={**cut, "epochs_per_task": 50})}})["runs"]
    )
    assert jobs.done(job, index) == "h100-2026-01-07/full"


def test_the_next_jobs_are_the_pending_ones_that_fit_in_order() -> None:
    jobs = load("jobs")
    queue = [
        {"name": "a", "minutes": 9, "args": []},
        {"name": "b", "minutes": 9, "args": []},
        {"name": "c", "minutes": 4, "args": []},
        {"name": "d", "minutes": 2, "args": []},
    ]
    empty: dict[str, Any] = {"runs": {}}
    assert [j["name"] for j in jobs.plan(queue, 15 * 60, empty)] == ["a", "c", "d"]
    assert [j["name"] for j in jobs.plan(queue, 5 * 60, empty)] == ["c"]
    index = index_of({"h200-2026-01-01": {"a": job_files()}})
    assert [j["name"] for j in jobs.plan(queue, 15 * 60, index)] == ["b", "c", "d"]


# ---------------------------------------------------------------------------------------------
# archives and the index


def test_an_archive_is_the_same_bytes_whatever_the_files_times_owners_and_order(tmp_path: Path) -> None:
    import os

    results = load("results")
    folder = tmp_path / "run"
    for name, data in {"b/x.json": b"{}", "a/y.log": b"y\n", "a/deep/z.jsonl": b"{}\n"}.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_bytes(data)
    results.pack(results.read_folder(folder), tmp_path / "one.tar.xz")
    os.utime(folder / "b" / "x.json", (1e9, 1e9))
    (folder / "a" / "y.log").chmod(0o600)
    files = results.read_folder(folder)
    results.pack(dict(reversed(list(files.items()))), tmp_path / "two.tar.xz")
    assert (tmp_path / "one.tar.xz").read_bytes() == (tmp_path / "two.tar.xz").read_bytes()
    with tarfile.open(tmp_path / "one.tar.xz") as tar:
        members = tar.getmembers()
    assert [m.name for m in members] == ["a/deep/z.jsonl", "a/y.log", "b/x.json"]
    assert {(m.mtime, m.uid, m.gid, m.uname, m.gname, m.mode) for m in members} == {(0, 0, 0, "", "", 0o644)}
    assert results.read_archive(tmp_path / "one.tar.xz") == files


def call_folder(folder: Path, jobs: dict[str, dict[str, bytes]]) -> Path:
    """What a call brings back: ``gpu/<job>.tar.gz`` per job (``./``-prefixed, as tar writes it)."""
    (folder / "gpu").mkdir(parents=True)
    for job, files in jobs.items():
        with tarfile.open(folder / "gpu" / f"{job}.tar.gz", "w:gz") as tar:
            for name, data in files.items():
                info = tarfile.TarInfo(f"./{name}")
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    (folder / "gpu" / "queue.json").write_text("{}")
    return folder


def test_add_files_a_calls_jobs_into_its_runs_archive_and_the_index(tmp_path: Path) -> None:
    results, jobs = load("results"), load("jobs")
    archive, index = tmp_path / "archive", tmp_path / "index.json"
    first = {"gpu-tests": job_files(), "bench": job_files(statuses=("ok", "error"))}
    run, added = results.add(call_folder(tmp_path / "call1", first), None, "2026-01-02", archive, index)
    assert (run, added) == ("h200-2026-01-02", ["bench", "gpu-tests"])
    held = results.read_archive(archive / "h200-2026-01-02.tar.xz")
    assert held == {f"{job}/{name}": data for job, files in first.items() for name, data in files.items()}
    written = json.loads(index.read_text())
    assert written == results.build_index(archive)
    assert jobs.done({"name": "gpu-tests"}, written) == "h200-2026-01-02/gpu-tests"
    assert jobs.done({"name": "bench"}, written) is None
    # a second call on the same machine: its jobs join the run's archive
    second = {"full": job_files(full={"complete": True, "epochs_per_task": 50, "epochs": 50})}
    results.add(call_folder(tmp_path / "call2", second), None, "2026-01-02", archive, index)
    assert sorted(results.jobs_of(results.read_archive(archive / "h200-2026-01-02.tar.xz"))) == [
        "bench",
        "full",
        "gpu-tests",
    ]
    assert jobs.done({"name": "full"}, json.loads(index.read_text())) == "h200-2026-01-02/full"
    # the same job again in that run is refused; under another run's name it is filed
    again = call_folder(tmp_path / "call3", {"bench": job_files()})
    with pytest.raises(results.UsageError, match="holds a job bench already"):
        results.add(again, None, "2026-01-02", archive, index)
    results.add(again, "h200-2026-01-02-b", None, archive, index)
    assert jobs.done({"name": "bench"}, json.loads(index.read_text())) == "h200-2026-01-02-b/bench"
    # one archive a call (device_call.sh's figures.tar.gz), named
    results.add(
        call_folder(tmp_path / "call4", {"figures": job_files()}),
        "h200-2026-01-02",
        None,
        archive,
        index,
        job="call4",
    )
    assert jobs.done({"name": "call4"}, json.loads(index.read_text())) == "h200-2026-01-02/call4"
    with pytest.raises(results.UsageError, match="holds 2 job archives"):
        results.add(call_folder(tmp_path / "call5", first), None, "2026-01-03", archive, index, job="x")
    unpacked = results.unpack(archive / "h200-2026-01-02-b.tar.xz", tmp_path / "out")
    assert sorted(p.relative_to(tmp_path / "out").as_posix() for p in unpacked) == [
        f"bench/{name}" for name in sorted(job_files())
    ]


def test_the_command_says_one_line_and_exits_2_on_a_users_mistake(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    results = load("results")
    assert results.main(["add", str(tmp_path)]) == 2
    assert results.main(["add", str(tmp_path), "--date", "yesterday"]) == 2
    assert results.main(["unpack", "no-such-run", str(tmp_path)]) == 2
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 3
    assert all(line.startswith("error: ") for line in lines)


def test_the_committed_index_is_what_the_archives_give() -> None:
    results = load("results")
    assert not (GPU / "results").exists()  # no raw run files beside the archives
    assert sorted(p.name for p in results.ARCHIVE.iterdir() if not p.name.endswith((".tar.xz", ".md"))) == []
    for archive in results.ARCHIVE.glob("*.tar.xz"):  # each run's history beside its archive
        assert archive.with_name(archive.name.removesuffix(".tar.xz") + ".md").exists()
    assert results.INDEX.read_text() == results.dumps(results.build_index())


# ---------------------------------------------------------------------------------------------
# the figures the docs quote

STEPS_PER_EPOCH = 313  # Split CIFAR-10's 10,000 images a task in batches of 32: ms a step from an epoch
C10 = "h200-2026-11-26/call1/bench/seq-cifar10-"
C100 = "h200-2026-11-26/call1/bench/seq-cifar100-"
REPLAYED = "h200-2026-11-27/call1/bench/seq-cifar10-stepgraph/methods/"
WHOLE = "h200-2026-11-27/call2/runs/[full-run/seed-0/20261127-190458-derpp-seq-cifar10-m200-s0/results.json]/"
GRAPHS = "h200-2026-11-26-graphs/call2/runs/[results.json]/"
EAGER_BF16 = "h200-2026-11-26/call2/runs/[full-run-results.json]/"
STEP_GRAPH = "h200-2026-11-27/call1/step_graph/"
PACK = "h200-2026-11-27/call1/pack/"


def bench_row(prefix: str) -> list[str | tuple[str, float]]:
    """A bench's step times of FT, ER, DER++ and X-DER, then DER++'s and X-DER's peak memory."""
    methods: list[str | tuple[str, float]] = [
        f"{prefix}/methods/{m}/step_ms" for m in ("sgd", "er", "derpp", "xder")
    ]
    return [*methods, f"{prefix}/methods/derpp/peak_mib", f"{prefix}/methods/xder/peak_mib"]


CORRECT = "h200-2026-11-26/call2/correctness/"
FP32 = C10 + "fp32/methods/"
PER_STEP = 1000 / STEPS_PER_EPOCH

# (page, words quoted with {} for each figure, the figures' index addresses, each with a factor)
FIGURES: list[tuple[str, str, list[str | tuple[str, float]]]] = [
    ("gpu.md", "graphs (the command above) | {} ms, measured", [REPLAYED + "xder/step_ms"]),
    ("gpu.md", "float32, eager (the command without the three `--set`) | {} ms, measured",
     [C100 + "fp32/methods/xder/step_ms"]),
    ("gpu.md", "about {} min of steps, evaluations not counted", [C100 + "fp32/methods/xder/protocol_min"]),
    ("gpu.md", "(FAA {} both)", [STEP_GRAPH + "faa_eager"]),
    ("gpu.md", "(FAA {} both)", [STEP_GRAPH + "faa_replayed"]),
    ("gpu.md", "gave Class-IL FAA {} against the paper's", [WHOLE + "faa"]),
    ("gpu.md", "epoch from {} s (bf16 and channels-last alone) to {} s",
     [EAGER_BF16 + "epoch_s_median", GRAPHS + "epoch_s_mean_after_first"]),
    ("gpu.md", "epoch to {} s ({} ms a step, from {} s without graphs and {} s with the backbone's)",
     [WHOLE + "epoch_s_median", (WHOLE + "epoch_s_median", PER_STEP),
      EAGER_BF16 + "epoch_s_median", GRAPHS + "epoch_s_mean_after_first"]),
    ("gpu.md", "whole protocol ran in {} minutes", [(WHOLE + "wall_s", 1 / 60)]),
    ("gpu.md", "its epoch {} s eager, {} s replayed",
     [STEP_GRAPH + "eager_epoch_s", STEP_GRAPH + "replayed_epoch_s"]),
    ("gpu.md", "| **{} s** ({} s an epoch), Class-IL FAA **{}**, Task-IL {} |",
     [WHOLE + "wall_s", WHOLE + "epoch_s_median", WHOLE + "faa", WHOLE + "task_il_faa"]),
    ("gpu.md", "| {} s ({} s an epoch), Class-IL FAA {} | {} MB |",
     [GRAPHS + "wall_s", GRAPHS + "epoch_s_mean_after_first", GRAPHS + "faa", GRAPHS + "peak_memory_mb"]),
    ("gpu.md", "| {} s ({} s an epoch) | - |",
     ["h200-2026-11-26/call2/phases/full_run/seconds", EAGER_BF16 + "epoch_s_median"]),
    ("gpu.md", "FT {} ({}), ER {} ({}), DER++ {} ({}), X-DER {} ({})",
     [REPLAYED + f"{m}/{k}" for m in ("sgd", "er", "derpp", "xder") for k in ("step_ms", "floor_ms")]),
    ("gpu.md", "float32 (TF32 convolutions, torch's default) | {} | {} | {} | {} | {} / {} |",
     bench_row(C10 + "fp32")),
    ("gpu.md", "| `seq-cifar10` | bf16 + channels-last | {} | {} | {} | {} | {} / {} |",
     bench_row(C10 + "bf16-cl")),
    ("gpu.md", "| `seq-cifar100` | float32 | {} | {} | {} | {} | {} / {} |", bench_row(C100 + "fp32")),
    ("gpu.md", "| `seq-cifar100` | bf16 + channels-last | {} | {} | {} | {} | {} / {} |",
     bench_row(C100 + "bf16-cl")),
    ("gpu.md", "{} epochs an hour in all with one run, {} with two, {} with four, {} with eight",
     [f"{PACK}{k}/epochs_per_hour" for k in (1, 2, 4, 8)]),
    ("gpu.md", "a step's loss matches the CPU's to {} and its gradients to {} (DER++) and {} (X-DER)",
     [CORRECT + "derpp-fp32/loss_rel", CORRECT + "derpp-fp32/grad_rel", CORRECT + "xder-fp32/grad_rel"]),
    ("performance.md", "| float32, eager | {} | {} | {} ({}) | {} ({}) | {} min, projected |",
     [FP32 + "sgd/step_ms", FP32 + "er/step_ms", FP32 + "derpp/step_ms", FP32 + "derpp/floor_ms",
      FP32 + "xder/step_ms", FP32 + "xder/floor_ms", FP32 + "derpp/protocol_min"]),
    ("performance.md", "| - | - | {} in the loop | - |", [(GRAPHS + "epoch_s_mean_after_first", PER_STEP)]),
    ("performance.md",
     "(`train.step_graph`) | {} | {} | {} ({}) | {} ({}) | **{} min, measured** (FAA {}, seed 0) |",
     [REPLAYED + "sgd/step_ms", REPLAYED + "er/step_ms", REPLAYED + "derpp/step_ms",
      REPLAYED + "derpp/floor_ms", REPLAYED + "xder/step_ms", REPLAYED + "xder/floor_ms",
      (WHOLE + "wall_s", 1 / 60), WHOLE + "faa"]),
    ("performance.md", "DER++ runs gave {}, {}, {} and {} epochs an hour in all",
     [f"{PACK}{k}/epochs_per_hour" for k in (1, 2, 4, 8)]),
]  # fmt: skip
NUMBER = r"([0-9][0-9,]*(?:\.[0-9]+)?(?:e-?[0-9]+)?)"


def quoted(text: str) -> tuple[float, float]:
    """A figure as printed and half a unit of its last printed digit (what rounding may move)."""
    text = text.replace(",", "")
    mantissa, _, exponent = text.partition("e")
    decimals = len(mantissa.partition(".")[2])
    return float(text), 0.5 * 10.0 ** (int(exponent or 0) - decimals)


@pytest.mark.parametrize(
    ("page", "words", "addresses"), FIGURES, ids=[f"{page}: {words[:40]}" for page, words, _ in FIGURES]
)
def test_each_figure_the_docs_quote_is_the_indexs(
    page: str, words: str, addresses: list[str | tuple[str, float]]
) -> None:
    results = load("results")
    index = results.load_index()
    text = " ".join((ROOT / "docs" / page).read_text().split())
    pattern = re.escape(words).replace(re.escape("{}"), NUMBER)
    found = re.findall(pattern, text)
    assert found, f"docs/{page} no longer says: {words}"
    for printed in found:
        for shown, address in zip(
            printed if isinstance(printed, tuple) else (printed,), addresses, strict=True
        ):
            path, factor = (address, 1.0) if isinstance(address, str) else address
            value, slack = quoted(shown)
            measured = results.figure(index, path) * factor
            assert abs(measured - value) <= slack * (1 + 1e-9), (
                f"docs/{page}: {shown} where {path} gives {measured}"
            )


def test_the_gpu_checks_the_docs_report_passed_in_the_index() -> None:
    """docs/gpu.md: no host sync in a step of FT, ER, DER++ or X-DER; a run killed and resumed on
    CUDA ends as the run left alone; replayed steps end as eager ones."""
    results = load("results")
    index = results.load_index()
    syncs = results.figure(index, "h200-2026-11-26-graphs/call1/syncs")
    assert sorted(syncs) == ["derpp", "er", "sgd", "xder"]
    assert all(counts == {"op_counter": 0, "cuda": 0} for counts in syncs.values())
    assert results.figure(index, "h200-2026-11-26/call2/resume/identical") is True
    assert results.figure(index, STEP_GRAPH + "identical") is True


def test_a_figure_quoted_wrong_is_caught() -> None:
    results = load("results")
    index = results.load_index()
    value, slack = quoted("60.72")
    assert abs(results.figure(index, WHOLE + "faa") - value) <= slack
    value, slack = quoted("60.75")
    assert abs(results.figure(index, WHOLE + "faa") - value) > slack
    assert quoted("7e-4") == (7e-4, 0.5e-4)
    assert quoted("2,052") == (2052.0, 0.5)
