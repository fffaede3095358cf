"""``--logger tensorboard`` and ``--logger wandb`` on a seq-digits run, read back from the files
each writes: TensorBoard's event files (with tensorboard's own ``EventAccumulator``) and the wandb
offline run folder (its ``.wandb`` transaction log, decoded record by record with wandb's own
protobuf schema, and the table files it writes under ``files/media/table``). Also: a tracker that
cannot start is one line and exit status 2 before any training."""

from __future__ import annotations

import json
import struct
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from xder_cli.main import main
from xder_cli.progress import TaskProgress

TINY = ["--epochs", "1", "--set", "backbone.width=4", "--device", "cpu"]
WANDB_ENV = ("WANDB_CONFIG_DIR", "WANDB_CACHE_DIR", "WANDB_DATA_DIR", "WANDB_ARTIFACT_DIR")


def quiet_wandb(monkeypatch: pytest.MonkeyPatch, home: Path) -> None:
    """wandb's offline mode (the default: no WANDB_MODE), its own folders kept out of ~."""
    monkeypatch.delenv("WANDB_MODE", raising=False)
    monkeypatch.delenv("WANDB_PROJECT", raising=False)
    for name in WANDB_ENV:
        monkeypatch.setenv(name, str(home / name.lower()))


@pytest.fixture(scope="module")
def logged_run(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("runs")
    with pytest.MonkeyPatch.context() as monkeypatch:
        quiet_wandb(monkeypatch, tmp_path_factory.mktemp("wandb-home"))
        argv = [
            "train",
            "--method",
            "er",
            "--out",
            str(out),
            *TINY,
            "--logger",
            "tensorboard",
            "--logger",
            "wandb",
        ]
        assert main(argv) == 0
    (run,) = [p for p in out.iterdir() if p.is_dir()]
    return run


def results(run: Path) -> dict:
    return json.loads((run / "results.json").read_text())


def epoch_events(run: Path) -> list[dict]:
    events = [json.loads(line) for line in (run / "events.jsonl").read_text().splitlines()]
    return [e for e in events if e["event"] == "epoch"]


# ---------------------------------------------------------------------------------------------
# TensorBoard


def test_tensorboard_holds_the_accuracy_matrix_losses_lr_metrics_and_config(logged_run: Path) -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.plugins.hparams import plugin_data_pb2

    accumulator = EventAccumulator(
        str(logged_run / "tensorboard"), size_guidance={"scalars": 0, "tensors": 0}
    )
    accumulator.Reload()
    expected = results(logged_run)
    # Row t of the matrix: each seen task's accuracy logged after task t (step t + 1: 1 epoch/task).
    scalars = {
        tag: {e.step: e.value for e in accumulator.Scalars(tag)} for tag in accumulator.Tags()["scalars"]
    }
    matrix = [[scalars[f"class_il/task_{j}"][t + 1] for j in range(t + 1)] for t in range(5)]
    assert matrix == [pytest.approx(row, abs=1e-4) for row in expected["accuracy_matrix"]]
    assert [scalars["class_il/task_0"][step] for step in sorted(scalars["class_il/task_0"])] == pytest.approx(
        [row[0] for row in expected["accuracy_matrix"]], abs=1e-4
    )
    assert scalars["task_il/task_2"][5] == pytest.approx(expected["task_il_accuracy_matrix"][4][2], abs=1e-4)
    # Per epoch: the loss terms and the lr, against events.jsonl
    epochs = epoch_events(logged_run)
    assert sorted(scalars["train/loss"]) == [1, 2, 3, 4, 5]
    assert [scalars["train/loss"][s + 1] for s in range(5)] == pytest.approx(
        [e["losses"]["loss"] for e in epochs], rel=1e-6
    )
    assert list(scalars["train/lr"].values()) == pytest.approx([0.05] * 5)
    assert scalars["final/faa"][5] == pytest.approx(expected["faa"], abs=1e-4)
    assert scalars["final/ff"][5] == pytest.approx(expected["ff"], abs=1e-4)
    # The matrix as a table, and the configuration as hyperparameters
    (text,) = accumulator.Tensors("accuracy_matrix/text_summary")
    table = text.tensor_proto.string_val[0].decode()
    assert table.splitlines()[0].startswith("| after task | task 0 | task 1")
    assert f"{expected['accuracy_matrix'][4][4]:.2f}" in table.splitlines()[-1]
    content = accumulator.PluginTagToContent("hparams")["_hparams_/session_start_info"]
    hparams = plugin_data_pb2.HParamsPluginData.FromString(content).session_start_info.hparams
    assert hparams["run.method"].string_value == "er"
    assert hparams["run.loggers"].string_value == '["tensorboard", "wandb"]'
    assert hparams["train.lr"].number_value == pytest.approx(0.05)
    assert hparams["backbone.width"].number_value == 4


# ---------------------------------------------------------------------------------------------
# wandb

LOG_HEADER = struct.Struct("<4sHB")  # ":W&B", magic 0xBEE1, version 0
CHUNK_HEADER = struct.Struct("<IHB")  # checksum, length, type (1 full, 2 first, 3 middle, 4 last)
BLOCK = 32 * 1024


def wandb_records(path: Path) -> Iterator:
    """The records of a ``.wandb`` transaction log, as ``wandb_internal_pb2.Record``.

    The file is a LevelDB-style log (what ``wandb sync`` reads): a 7-byte header, then 32 KiB
    blocks of chunks; a record too long for a block is split into first/middle/last chunks, and a
    block's tail shorter than a chunk header is padding.
    """
    from wandb.proto import wandb_internal_pb2

    data = path.read_bytes()
    ident, magic, version = LOG_HEADER.unpack_from(data)
    assert (ident, magic, version) == (b":W&B", 0xBEE1, 0)
    position, pending = LOG_HEADER.size, b""
    while position + CHUNK_HEADER.size <= len(data):
        left = BLOCK - position % BLOCK
        if left < CHUNK_HEADER.size:
            position += left
            continue
        _, length, kind = CHUNK_HEADER.unpack_from(data, position)
        if kind == 0:  # zero padding to the end of the block
            position += left
            continue
        chunk = data[position + CHUNK_HEADER.size : position + CHUNK_HEADER.size + length]
        position += CHUNK_HEADER.size + length
        pending = chunk if kind in (1, 2) else pending + chunk
        if kind in (1, 4):
            record = wandb_internal_pb2.Record()
            record.ParseFromString(pending)
            yield record


def items(update) -> dict:
    return {item.key or "/".join(item.nested_key): json.loads(item.value_json) for item in update}


def test_wandb_offline_run_holds_the_accuracy_matrix_losses_lr_metrics_and_config(logged_run: Path) -> None:
    (folder,) = (logged_run / "wandb").glob("offline-run-*")
    (log,) = folder.glob("run-*.wandb")
    run_id = (logged_run / "wandb" / "xder-run-id").read_text().strip()
    assert log.name == f"run-{run_id}.wandb"
    records = list(wandb_records(log))
    kinds = [r.WhichOneof("record_type") for r in records]
    assert "exit" in kinds
    history = [items(r.history.item) for r in records if r.WhichOneof("record_type") == "history"]
    expected = results(logged_run)
    # Per task (stepped by "task"): row t of the accuracy matrix
    tasks = sorted((row for row in history if "task" in row), key=lambda row: row["task"])
    assert [row["task"] for row in tasks] == [1, 2, 3, 4, 5]
    matrix = [[row[f"class_il/task_{j}"] for j in range(row["task"])] for row in tasks]
    assert matrix == [pytest.approx(r) for r in expected["accuracy_matrix"]]
    # Per epoch (stepped by "epoch"): losses and lr, against events.jsonl
    epochs = [row for row in history if "epoch" in row]
    assert [row["epoch"] for row in epochs] == [1, 2, 3, 4, 5]
    assert [row["train/loss"] for row in epochs] == pytest.approx(
        [e["losses"]["loss"] for e in epoch_events(logged_run)]
    )
    assert {row["train/lr"] for row in epochs} == {0.05}
    # Final metrics in the summary, the configuration in the run record
    summary = {}
    for record in records:
        if record.WhichOneof("record_type") == "summary":
            summary |= items(record.summary.update)
    assert summary["final/faa"] == pytest.approx(expected["faa"])
    assert summary["final/task_il_faa"] == pytest.approx(expected["task_il_faa"])
    (run_record,) = [r.run for r in records if r.WhichOneof("record_type") == "run"]
    # a section's value, bare or wrapped as {"value": ..., "desc": ...} (wandb's config.yaml form)
    config = {key: value.get("value", value) for key, value in items(run_record.config.update).items()}
    assert config["run"]["method"] == "er"
    assert config["train"]["lr"] == 0.05
    assert config["run"]["loggers"] == ["tensorboard", "wandb"]
    assert config["backbone"]["width"] == 4
    # The whole matrix as a table file
    (table_file,) = (folder / "files" / "media" / "table").glob("accuracy_matrix_*.table.json")
    table = json.loads(table_file.read_text())
    assert table["columns"] == ["after_task", "task_0", "task_1", "task_2", "task_3", "task_4"]
    assert [row[0] for row in table["data"]] == [0, 1, 2, 3, 4]
    assert [row[1 : t + 2] for t, row in enumerate(table["data"])] == [
        pytest.approx(r) for r in expected["accuracy_matrix"]
    ]
    assert table["data"][0][2:] == [None, None, None, None]


def test_events_jsonl_stays_the_record(logged_run: Path) -> None:
    assert len(epoch_events(logged_run)) == 5
    assert results(logged_run)["complete"] is True


# ---------------------------------------------------------------------------------------------
# Failures


@pytest.mark.parametrize(
    ("logger", "module"), [("tensorboard", "torch.utils.tensorboard"), ("wandb", "wandb")]
)
def test_a_missing_tracker_package_is_one_line_before_anything(
    logger, module, tmp_path: Path, monkeypatch, capsys
) -> None:
    monkeypatch.setitem(sys.modules, module, None)  # import fails as if not installed
    assert main(["train", "--method", "sgd", "--out", str(tmp_path), *TINY, "--logger", logger]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert f"--logger {logger} needs the {logger} package" in err
    assert f"xder-cli[{logger}]" in err
    assert list(tmp_path.iterdir()) == []  # no run directory


def test_a_tracker_that_fails_to_start_stops_the_run_before_training(
    tmp_path: Path, monkeypatch, capsys
) -> None:
    quiet_wandb(monkeypatch, tmp_path / "home")
    monkeypatch.setenv("WANDB_MODE", "sideways")  # a mode wandb rejects
    out = tmp_path / "runs"
    assert main(["train", "--method", "sgd", "--out", str(out), *TINY, "--logger", "wandb"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "Traceback" not in err
    assert "--logger wandb failed to start" in err
    assert list(out.iterdir()) == []  # nothing trained: the failed start left no run folder


def test_an_unknown_logger_is_a_usage_error(tmp_path: Path, capsys) -> None:
    assert main(["train", "--out", str(tmp_path), "--logger", "mlflow"]) == 2
    assert "invalid choice: 'mlflow'" in capsys.readouterr().err
    assert main(["train", "--out", str(tmp_path), "--set", 'run.loggers=["mlflow"]']) == 2
    assert "run.loggers" in capsys.readouterr().err


def test_sweep_and_experiment_runs_get_the_loggers(tmp_path: Path, monkeypatch) -> None:
    import xder_cli.runs.experiments.class_order as class_order_module
    import xder_cli.runs.experiments.common as experiment_module
    import xder_cli.runs.sweep as sweep_module

    grid = tmp_path / "grid.toml"
    grid.write_text('method = "sgd"\nbenchmark = "seq-digits"\n[grid]\n"train.lr" = [0.1, 0.2]\n')
    planned: list[dict] = []

    def plan_only(spec, out, **kwargs):
        planned.extend(trial.config for trial in sweep_module.plan_trials(spec))
        return sweep_module.select(spec, [], {})

    monkeypatch.setattr(sweep_module, "run_sweep", plan_only)
    assert main(["sweep", str(grid), "--out", str(tmp_path / "sweep"), "--logger", "tensorboard"]) == 1
    assert [config["run"]["loggers"] for config in planned] == [["tensorboard"], ["tensorboard"]]

    def execute_nothing(runs, root, **kwargs):
        planned[:] = [run.config for run in runs]
        return {}

    monkeypatch.setattr(experiment_module, "execute", execute_nothing)
    monkeypatch.setattr(class_order_module, "plot_class_order", lambda summary, path: None)
    argv = ["experiment", "class-order", "--methods", "sgd", "--seeds", "0", "--out", str(tmp_path / "exp")]
    main([*argv, "--logger", "wandb", "--logger", "tensorboard"])
    assert [config["run"]["loggers"] for config in planned] == [["wandb", "tensorboard"]] * 2


def test_a_resumed_run_continues_its_logs(tmp_path: Path, monkeypatch) -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    quiet_wandb(monkeypatch, tmp_path / "home")
    out = tmp_path / "runs"
    original = TaskProgress.on_task_end

    def stop_after_second_task(self, loop, record):
        original(self, loop, record)
        if record.task == 1:
            raise KeyboardInterrupt

    with monkeypatch.context() as patch:
        patch.setattr(TaskProgress, "on_task_end", stop_after_second_task)
        argv = [
            "train",
            "--method",
            "sgd",
            "--out",
            str(out),
            *TINY,
            "--logger",
            "tensorboard",
            "--logger",
            "wandb",
        ]
        assert main(argv) == 130
    (run,) = out.iterdir()
    assert main(["train", "--resume", str(run)]) == 0
    accumulator = EventAccumulator(str(run / "tensorboard"), size_guidance={"scalars": 0})
    accumulator.Reload()
    assert [e.step for e in accumulator.Scalars("train/loss")] == [1, 2, 3, 4, 5]
    assert [e.step for e in accumulator.Scalars("class_il/task_0")] == [1, 2, 3, 4, 5]
    folders = sorted((run / "wandb").glob("offline-run-*"))
    assert len(folders) == 2  # one per session, one run id
    run_id = (run / "wandb" / "xder-run-id").read_text().strip()
    epochs = []
    for folder in folders:
        (log,) = folder.glob("run-*.wandb")
        assert log.name == f"run-{run_id}.wandb"
        for record in wandb_records(log):
            if record.WhichOneof("record_type") == "history":
                row = items(record.history.item)
                epochs += [row["epoch"]] if "epoch" in row else []
    assert epochs == [1, 2, 3, 4, 5]


# ---------------------------------------------------------------------------------------------
# Scenarios: each accuracy under its name, nothing of one the scenario does not report


def hparams_metrics(accumulator) -> list[str]:
    """The metrics the TensorBoard HParams plugin was told of."""
    from tensorboard.plugins.hparams import plugin_data_pb2

    content = accumulator.PluginTagToContent("hparams")["_hparams_/experiment"]
    experiment = plugin_data_pb2.HParamsPluginData.FromString(content).experiment
    return [info.name.tag for info in experiment.metric_infos]


@pytest.mark.parametrize(
    ("benchmark", "tasks", "own", "final"),
    [
        ("perm-digits", ["--set", "train.tasks=2"], "domain_il", ["final/faa", "final/ff"]),
        ("digits-360", [], "accuracy", ["final/faa"]),
    ],
)
def test_a_scenario_without_task_il_logs_its_own_accuracy_and_no_task_il(
    benchmark: str, tasks: list[str], own: str, final: list[str], tmp_path: Path, monkeypatch
) -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    quiet_wandb(monkeypatch, tmp_path / "home")
    out = tmp_path / "runs"
    argv = ["train", "--benchmark", benchmark, "--method", "sgd", "--out", str(out), *tasks]
    argv += ["--epochs", "1", "--device", "cpu"]  # the MLP of the digits' scenarios: no width
    assert main([*argv, "--logger", "tensorboard", "--logger", "wandb"]) == 0
    (run,) = out.iterdir()
    expected = results(run)
    accumulator = EventAccumulator(str(run / "tensorboard"), size_guidance={"scalars": 0, "tensors": 0})
    accumulator.Reload()
    tags = set(accumulator.Tags()["scalars"])
    n = len(expected["accuracy_matrix"])
    per_task = {t for t in tags if "/" in t and not t.startswith(("train/", "final/"))}
    assert per_task == {f"{own}/task_{j}" for j in range(n)} | {f"{own}/average"}
    last = {j: accumulator.Scalars(f"{own}/task_{j}")[-1].value for j in range(n)}
    assert list(last.values()) == pytest.approx(expected["accuracy_matrix"][-1], abs=1e-4)
    assert {t for t in tags if t.startswith("final/")} == {
        f"final/{k}" for k in ("faa", "ff", "bwt") if expected[k] is not None
    } | {"final/wall_time_s"}
    assert sorted(hparams_metrics(accumulator)) == final
    texts = {t.split("/")[0] for t in accumulator.Tags()["tensors"]}
    assert "accuracy_matrix" in texts
    assert "task_il_accuracy_matrix" not in texts

    (folder,) = (run / "wandb").glob("offline-run-*")
    (log,) = folder.glob("run-*.wandb")
    records = list(wandb_records(log))
    history = [items(r.history.item) for r in records if r.WhichOneof("record_type") == "history"]
    logged = set().union(*(row for row in history if "task" in row))
    assert {k for k in logged if "il" in k or k.startswith("accuracy")} == {
        f"{own}/task_{j}" for j in range(n)
    } | {f"{own}/average"}
    assert not list((folder / "files" / "media" / "table").glob("task_il_accuracy_matrix_*"))
    assert list((folder / "files" / "media" / "table").glob("accuracy_matrix_*"))
