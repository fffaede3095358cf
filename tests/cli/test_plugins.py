"""Plugins through xder-run in-process: ``--plugin FILE`` (the example package's modules, loaded by
path), entry points, and every failure as one line with exit status 2. A Ray worker's view of the
driver's plugins is tested in tests/runs/test_plugins.py."""

from __future__ import annotations

import json
import sys
import tomllib
from importlib.metadata import EntryPoint
from pathlib import Path

import pytest

import xder_cli.runs.plugins as plugins
from xder_cli.arguments import command_word, out_folder, plugin_arguments
from xder_cli.main import main
from xder_models import list_backbones

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "plugin" / "src" / "xder_plugin_example"
FILES = [str(EXAMPLE / name) for name in ("methods.py", "benchmarks.py", "backbones.py")]
PLUGIN_FLAGS = [arg for path in FILES for arg in ("--plugin", path)]
FAST = ["--epochs", "1", "--device", "cpu"]


pytestmark = pytest.mark.usefixtures("fresh_registries")


def one_line_error(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert "Traceback" not in err
    return err


def test_plugin_files_work_like_built_ins_train_resume_report(tmp_path: Path, capsys) -> None:
    runs = tmp_path / "runs"
    argv = ["train", *PLUGIN_FLAGS, "--method", "er_balanced", "--benchmark", "seq-stripes", *FAST]
    assert (
        main([*argv, "--out", str(runs), "--set", "method.power=0.5", "--set", "benchmark.per_class=20"]) == 0
    )
    (run,) = runs.iterdir()
    config = tomllib.loads((run / "config.toml").read_text())
    assert config["run"]["method"] == "er_balanced"
    assert config["method"]["power"] == 0.5
    assert config["method"]["buffer_size"] == 60  # the plugin benchmark's protocol
    assert config["backbone"] == {"name": "tiny-cnn", "width": 8, "in_channels": 3}
    assert config["benchmark"] == {"per_class": 20, "size": 16, "noise": 0.15}
    results = json.loads((run / "results.json").read_text())
    assert results["complete"] is True
    assert [len(row) for row in results["accuracy_matrix"]] == [1, 2, 3]
    capsys.readouterr()

    # A second run, plain ER, for the report; then resume and report, with the plugins again.
    assert (
        main(
            [
                "train",
                *PLUGIN_FLAGS,
                "--method",
                "er",
                "--benchmark",
                "seq-stripes",
                *FAST,
                "--out",
                str(runs),
            ]
        )
        == 0
    )
    assert main(["train", *PLUGIN_FLAGS, "--resume", str(run)]) == 0
    assert "already complete" in capsys.readouterr().out
    assert main(["report", str(runs), "--out", str(tmp_path / "report"), *PLUGIN_FLAGS]) == 0
    table = (tmp_path / "report" / "table.md").read_text()
    assert "er_balanced" in table
    assert "seq-stripes" in table


def test_every_command_that_reads_a_run_loads_the_plugins_it_records(
    tmp_path: Path, capsys, fresh_registries
) -> None:
    """A run of a plugin's method on a plugin's benchmark, then (the plugins forgotten before each
    command, as in a new process) resume, analyze and report with no --plugin: each loads the
    plugins the run's config.toml records."""
    runs = tmp_path / "runs"
    argv = ["train", *PLUGIN_FLAGS, "--method", "er_balanced", "--benchmark", "seq-stripes", *FAST]
    assert main([*argv, "--out", str(runs)]) == 0
    (run,) = runs.iterdir()
    capsys.readouterr()
    fresh_registries()
    assert main(["train", "--resume", str(run)]) == 0
    assert "already complete" in capsys.readouterr().out
    fresh_registries()
    assert main(["analyze", str(run), "--only", "ece", "--json"]) == 0, capsys.readouterr().err
    assert 0 <= json.loads(capsys.readouterr().out)["analyses"]["ece"]["ece"] <= 1
    fresh_registries()
    assert main(["report", str(runs), "--out", str(tmp_path / "report")]) == 0
    assert "er_balanced" in (tmp_path / "report" / "table.md").read_text()


def test_help_lists_what_plugins_register(capsys) -> None:
    assert main(["train", "--help", *PLUGIN_FLAGS]) == 0
    out = capsys.readouterr().out
    assert "er_balanced" in out
    assert "seq-stripes" in out
    assert main(["--plugin", FILES[2], "report", "--help"]) == 0
    assert "tiny-cnn" not in capsys.readouterr().out  # the report's help does not list backbones
    assert "tiny-cnn" in list_backbones()


def test_without_the_plugin_the_name_is_unknown(tmp_path: Path, capsys) -> None:
    assert main(["train", "--method", "er_balanced", *FAST, "--out", str(tmp_path)]) == 2
    assert "unknown method 'er_balanced'" in one_line_error(capsys)


def test_plugin_arguments_are_found_anywhere() -> None:
    argv = [
        "--plugin",
        "a.py",
        "train",
        "--plugin=b",
        "--method",
        "x",
        "--plugin",
        "c",
        "--",
        "--plugin",
        "d",
    ]
    assert plugin_arguments(argv) == ["a.py", "b", "c"]


def test_the_command_and_its_out_folder_are_read_before_parsing() -> None:
    argv = ["--plugin", "experiment", "--plugin=x", "experiment", "seeds", "--out", "a", "--out=b"]
    assert command_word(argv) == "experiment"  # the first word that is no --plugin's value
    assert out_folder(argv) == "b"  # the last, as argparse keeps
    assert command_word(["--plugin", "a.py", "train", "--out", "r"]) == "train"
    assert command_word(["--", "train"]) is None
    assert command_word(["--plugin", "a.py"]) is None
    assert out_folder(["train", "--", "--out", "r"]) is None
    assert plugin_arguments(["train", "--plugin"]) == []


@pytest.mark.parametrize(
    ("source", "message"),
    [
        (
            "raise ImportError('needs the lab toolbox')",
            "failed to import: ImportError: needs the lab toolbox",
        ),
        ("def broken(:\n", "failed to import: SyntaxError"),
        (
            "from xder_methods import ER, ReplayConfig, register_method\n"
            "register_method('er', ReplayConfig)(ER)",
            "ValueError: method 'er' is already registered",
        ),
        (
            "from xder_models import register_backbone\nregister_backbone('resnet18-cifar')(lambda n: None)",
            "backbone 'resnet18-cifar' is already registered",
        ),
        (
            "from xder_data import register_benchmark, BenchmarkDefaults\n"
            "d = BenchmarkDefaults(epochs=1, batch_size=1, minibatch_size=1, lr=0.1)\n"
            "register_benchmark('seq-digits', defaults=d)(lambda root: None)",
            "benchmark 'seq-digits' is already registered",
        ),
    ],
)
def test_a_failing_plugin_file_is_one_line(source, message, tmp_path: Path, capsys) -> None:
    path = tmp_path / "lab_plugin.py"
    path.write_text(source)
    out = tmp_path / "runs"  # where the run's folder would be made (train makes --out if missing)
    assert main(["train", "--plugin", str(path), "--out", str(out)]) == 2
    err = one_line_error(capsys)
    assert message in err
    assert str(path) in err
    assert not out.exists()


def test_a_plugin_that_is_not_there(tmp_path: Path, capsys) -> None:
    assert main(["data", "info", "seq-digits", "--plugin", str(tmp_path / "nope.py")]) == 2
    assert "no such file" in one_line_error(capsys)
    assert main(["report", "runs", "--plugin", "no_such_plugin_module"]) == 2
    assert "no module named 'no_such_plugin_module'" in one_line_error(capsys)


def test_entry_points_are_loaded_and_their_failures_are_one_line(tmp_path: Path, monkeypatch, capsys) -> None:
    (tmp_path / "lab_methods.py").write_text((EXAMPLE / "methods.py").read_text())
    (tmp_path / "lab_broken.py").write_text("raise RuntimeError('lab server unreachable')")
    monkeypatch.syspath_prepend(str(tmp_path))
    good = EntryPoint(name="er_balanced", value="lab_methods", group="xder.methods")
    bad = EntryPoint(name="broken", value="lab_broken", group="xder.benchmarks")
    installed = {"xder.methods": [good], "xder.benchmarks": [], "xder.backbones": []}
    monkeypatch.setattr(plugins, "entry_points", lambda group: installed[group])
    monkeypatch.delitem(sys.modules, "lab_methods", raising=False)
    assert main(["train", "--help"]) == 0
    assert "er_balanced" in capsys.readouterr().out
    installed["xder.benchmarks"] = [bad]
    assert main(["data", "info", "seq-digits"]) == 2
    err = one_line_error(capsys)
    assert "plugin entry point xder.benchmarks:broken (lab_broken) failed to load" in err
    assert "RuntimeError: lab server unreachable" in err


EXPERIMENT_PLUGIN = '''
"""A plugin experiment: the method of --method (default er) once per seed, the FAA of each."""

from xder_cli.runs import rundir
from xder_cli.runs.experiments import PlannedExperiment, PlannedRun, register_experiment
from xder_cli.runs.experiments.common import faa_metrics, run_config


class Seeds:
    name = "seeds"
    options = frozenset({"method"})

    def plan(self, options, common, notify):
        method = options.method or "er"
        runs = [
            PlannedRun(
                f"{method}-s{seed}",
                seed,
                run_config(method, options.benchmark, seed, options.run_sets(), options.protocol),
                {"method": method},
            )
            for seed in options.seeds
        ]

        def summarize(outcomes, root):
            faa = {run.name: faa_metrics(rundir.complete_results(root / run.name))["faa"] for run in runs}
            return common | {"faa": faa}

        return PlannedExperiment(
            runs,
            summarize,
            lambda summary: "".join(f"{name}: {faa}\\n" for name, faa in summary["faa"].items()),
            lambda summary, path: path.write_bytes(b"plot"),
            lambda results: f"FAA {faa_metrics(results)['faa']}",
            plot_file="seeds.png",
        )


register_experiment(Seeds())
'''


def test_a_plugin_adds_an_experiment_that_plans_trains_and_tabulates(
    tmp_path: Path, capsys, fresh_registries
) -> None:
    plugin = tmp_path / "seeds_experiment.py"
    plugin.write_text(EXPERIMENT_PLUGIN)
    out = tmp_path / "seeds"
    tiny = ["--set", "train.epochs=1", "--set", "backbone.width=4", "--set", "run.device=cpu"]
    assert main(["--plugin", str(plugin), "experiment", "--help"]) == 0
    assert "seeds" in capsys.readouterr().out
    argv = ["--plugin", str(plugin), "experiment", "seeds", "--method", "sgd", "--seeds", "0,1"]
    assert main([*argv, "--out", str(out), *tiny]) == 0
    # an option the plugin's experiment does not name is refused, as for the paper's four
    assert main([*argv, "--pairs", "1", "--out", str(out)]) == 2
    assert capsys.readouterr().err.startswith("xder-run experiment: error: --pairs ")
    fresh_registries()
    names = ("sgd-s0", "sgd-s1")
    summary = json.loads((out / "experiment.json").read_text())
    runs = {name: json.loads((out / "runs" / name / "results.json").read_text()) for name in names}
    assert summary["faa"] == {name: results["faa"] for name, results in runs.items()}
    assert (out / "experiment.md").read_text() == "".join(f"{n}: {r['faa']}\n" for n, r in runs.items())
    assert (out / "seeds.png").read_bytes() == b"plot"
    # Its runs record the plugin: analyze reads one without --plugin, and the experiment run again
    # without --plugin loads it and trains nothing again.
    assert main(["analyze", str(out / "runs" / "sgd-s0"), "--only", "ece", "--json"]) == 0
    assert 0 <= json.loads(capsys.readouterr().out)["analyses"]["ece"]["ece"] <= 1
    fresh_registries()
    assert main(["experiment", "seeds", "--method", "sgd", "--seeds", "0,1", "--out", str(out), *tiny]) == 0
    assert "2 runs, 2 already finished" in capsys.readouterr().out
    fresh_registries()
    assert main(["experiment", "seeds", "--out", str(tmp_path / "elsewhere")]) == 2  # no runs: unknown
    assert "invalid choice: 'seeds'" in capsys.readouterr().err


def test_the_method_on_the_plugins_page_trains_and_resumes_as_written(tmp_path: Path, capsys) -> None:
    # docs/plugins.md's "A method: what it implements" example, run as the page says to.
    page = (Path(__file__).parents[2] / "docs" / "plugins.md").read_text()
    section = page.split("## A method: what it implements", 1)[1]
    code = section.split("```python\n", 1)[1].split("```", 1)[0]
    assert 15 <= len([line for line in code.splitlines() if line.strip()]) <= 30
    plugin = tmp_path / "my_er.py"
    plugin.write_text(code)
    runs = tmp_path / "runs"
    argv = [
        "train",
        "--plugin",
        str(plugin),
        "--method",
        "my_er",
        "--out",
        str(runs),
        *FAST,
        "--set",
        "backbone.width=4",
    ]
    assert main([*argv, "--buffer-size", "50"]) == 0
    (run,) = runs.iterdir()
    results = json.loads((run / "results.json").read_text())
    assert results["complete"] is True
    assert results["buffer_size"] == 50
    assert len(results["accuracy_matrix"]) == 5
    assert "training my_er on seq-digits (buffer 50" in capsys.readouterr().out


def analysis_plugin(folder: Path) -> Path:
    """docs/plugins.md's "An analysis of your own" example, as a plugin file in ``folder``."""
    page = (Path(__file__).parents[2] / "docs" / "plugins.md").read_text()
    section = page.split("## An analysis of your own", 1)[1]
    plugin = folder / "weight_norm.py"
    plugin.write_text(section.split("```python\n", 1)[1].split("```", 1)[0])
    return plugin


def test_the_analysis_on_the_plugins_page_records_and_analyses_as_written(
    tmp_path: Path, capsys, fresh_registries
) -> None:
    """docs/plugins.md's "An analysis of your own": registered by a plugin file, recorded while
    training, then run by xder-run analyze (the run's recorded plugin loaded again by itself)."""
    plugin = analysis_plugin(tmp_path)
    runs = tmp_path / "runs"
    tiny = [*FAST, "--set", "backbone.width=4", "--set", "run.threads=1", "--out", str(runs)]
    assert main(["train", "--plugin", str(plugin), "--method", "derpp", "--record-analyses", *tiny]) == 0
    (run,) = runs.iterdir()
    events = [json.loads(line) for line in (run / "events.jsonl").read_text().splitlines()]
    recorded = [e for e in events if e["event"] == "analysis"]
    # the built-ins' keys where they always were; the plugin's after those that need the records
    assert list(recorded[0]) == [
        "event",
        "task",
        "fewshot",
        "weight_norm",
        "buffer_class_logits",
        "peak_memory_mb",
        "seconds",
    ]
    norms = [e["weight_norm"] for e in recorded]
    assert len(norms) == 5
    assert len(set(norms)) == 5  # each after its own task's training
    assert main(["analyze", "--plugin", str(plugin), "--help"]) == 0
    assert "weight_norm" in capsys.readouterr().out
    fresh_registries()
    assert main(["analyze", str(run), "--only", "ece,weight_norm"]) == 0, capsys.readouterr().err
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("ece: ECE ")
    assert out[1] == "weight_norm: weight norm after each task: " + " ".join(f"{v:.2f}" for v in norms)
    report = json.loads((run / "analysis" / "analysis.json").read_text())
    assert list(report["analyses"]) == ["ece", "weight_norm"]
    value = report["analyses"]["weight_norm"]
    assert value["after_task"] == norms
    assert value["plot"] == "weight_norm.png"
    assert value["seconds"] >= 0
    assert (run / "analysis" / "weight_norm.png").read_bytes().startswith(b"\x89PNG")
    fresh_registries()
    assert main(["analyze", str(run), "--only", "weight_norm", "--plugin", str(plugin)]) == 0
    capsys.readouterr()


def test_an_analysis_that_needs_records_is_refused_on_a_run_without_them(tmp_path: Path, capsys) -> None:
    plugin = analysis_plugin(tmp_path)
    runs = tmp_path / "runs"
    argv = ["train", "--plugin", str(plugin), "--method", "sgd", *FAST, "--set", "backbone.width=4"]
    assert main([*argv, "--set", "train.tasks=2", "--out", str(runs)]) == 0
    (run,) = runs.iterdir()
    assert all(
        "weight_norm" not in json.loads(line) for line in (run / "events.jsonl").read_text().splitlines()
    )
    capsys.readouterr()
    assert main(["analyze", str(run), "--only", "weight_norm"]) == 2
    assert one_line_error(capsys).endswith(
        "was trained without recording what weight_norm reads: "
        "train it with --record-analyses (run.record_analyses = true)"
    )
