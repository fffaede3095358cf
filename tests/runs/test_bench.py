"""The bench (xder_cli.runs.bench.run_bench) on tiny configurations: every figure of its payload
against a scripted clock, the images, ops and host syncs of a step counted on real steps, and the
width, batch and buffer a protocol gives."""

from __future__ import annotations

import pytest
import torch

from xder_cli.runs import bench
from xder_cli.runs.bench import BenchOptions, run_bench, with_protocol


def _options(*train: tuple[str, object], **overrides) -> BenchOptions:
    """The tiny bench, ``train``'s ``("train.KEY", value)`` settings first in its settings."""
    base = {
        "methods": ("er", "derpp", "xder"),
        "benchmark": "seq-digits",
        "backbone": "resnet18-cifar",
        "width": 4,
        "batch_size": 8,
        "buffer_size": 40,
        "task": 1,
        "device": "cpu",
        "steps": 2,
        "warmup": 1,
        "epoch": True,
    }
    options = base | overrides
    options["settings"] = (*train, *options.get("settings", ()))
    return BenchOptions(**options)


class ScriptedClock:
    """Stands in for bench's ``time``: it moves only by the seconds the test says each call took."""

    def __init__(self) -> None:
        self.now = 0.0

    def perf_counter(self) -> float:
        return self.now


def test_bench_reports_every_figure(monkeypatch) -> None:
    # Real steps run (images, ops and syncs are counted on them), but each timed call takes the
    # scripted seconds on bench's clock, so every timing figure is known by hand: a real ratio is
    # one measured median over another, and nothing else measured could confirm it. The first call
    # of each is the warm-up round (100 s): it must count in no median and no total.
    step_seconds = {"er": [100, 1, 4, 2], "derpp": [100, 3, 5, 4], "xder": [100, 9, 10, 11]}
    floor_seconds = [100, 0.25, 1, 0.5]
    epoch_seconds = {"er": 7, "derpp": 11, "xder": 13}
    clock = ScriptedClock()
    real_subject = bench._subject

    def timed(fn, seconds):
        seconds = iter(seconds)  # one entry per call bench makes: a call more raises StopIteration

        def call():
            result = fn()
            clock.now += next(seconds)
            return result

        return call

    def scripted(name, *args):
        subject = real_subject(name, *args)
        subject.step = timed(subject.step, step_seconds[name])
        subject.floor = timed(subject.floor, floor_seconds)
        subject.epoch = timed(subject.epoch, [epoch_seconds[name]])
        return subject

    monkeypatch.setattr(bench, "_subject", scripted)
    monkeypatch.setattr(bench, "time", clock)
    payload = run_bench(_options(steps=3))
    figures = {"device", "threads", "torch", "settings", "methods", "ratios", "cudagraph_counters"}
    assert set(payload) == figures
    assert payload["cudagraph_counters"] is None  # no CUDA graphs
    rows = {r["method"]: r for r in payload["methods"]}
    assert set(rows) == {"er", "derpp", "xder"}
    b = 8
    # ER: stream + replay in one forward; DER++: three forwards; X-DER: three forwards plus two
    # strong views of (B stream + min(simclr_batch_size 64, M 40) buffer) items.
    assert rows["er"]["images_per_step"] == 2 * b
    assert rows["derpp"]["images_per_step"] == 3 * b
    assert rows["xder"]["images_per_step"] == 3 * b + 2 * (b + 40)
    # Medians of the timed rounds: er (1, 4, 2), derpp (3, 5, 4), xder (9, 10, 11); floors
    # (0.25, 1, 0.5). Epochs: the scripted seconds, times 10 epochs x 5 tasks for the protocol.
    expected = {"er": (2, 4, 7, 350), "derpp": (4, 8, 11, 550), "xder": (10, 20, 13, 650)}
    for name, row in rows.items():
        step, over_floor, epoch, protocol = expected[name]
        assert row["host_syncs_per_step"] == 0
        assert row["ops_per_step"] > row["launches_per_step"] > 0  # views launch nothing
        assert (row["seconds_per_step"], row["floor_seconds"]) == (step, 0.5)
        assert row["step_over_floor"] == over_floor
        assert row["epoch_steps"] == 36  # 144 items per class x 2 classes / batch 8
        assert (row["epoch_seconds"], row["projected_protocol_seconds"]) == (epoch, protocol)
        # Every timed round of every method: steps 7 + 12 + 30 s, floors 3 x 1.75 s.
        assert row["timed_seconds"] == 54.25
        assert row["peak_memory_bytes"] is None  # measured on CUDA only
        assert row["step_memory_bytes"] is None
    assert payload["ratios"] == {"xder/derpp": 2.5, "xder/er": 5.0}


@pytest.mark.parametrize(
    ("benchmark", "backbone", "expected"),
    [
        ("seq-miniimg", None, "efficientnet-b2"),  # the paper's backbone for Split miniImageNet
        ("seq-cifar100", None, "resnet18-cifar"),
        ("seq-miniimg", "resnet18-cifar", "resnet18-cifar"),  # asked for: kept
    ],
)
def test_the_backbone_is_the_protocols_unless_asked(benchmark: str, backbone, expected: str) -> None:
    from xder_data import benchmark_defaults

    asked = BenchOptions(benchmark=benchmark, backbone=backbone)
    options = with_protocol(asked, benchmark_defaults(benchmark, "full"))
    assert asked.backbone == backbone  # a new value: the options asked for are left as they are
    assert options.backbone == expected
    assert (options.batch_size, options.buffer_size) == {
        "seq-miniimg": (128, 2000),
        "seq-cifar100": (32, 500),
    }[benchmark]


@pytest.mark.parametrize(("benchmark", "buffer_size"), [("seq-cifar10", 200), ("seq-cifar100", 500)])
def test_bench_takes_width_batch_and_buffer_from_the_protocol(benchmark: str, buffer_size: int) -> None:
    options = BenchOptions(
        methods=("er",),
        benchmark=benchmark,
        protocol="laptop",
        backbone="resnet18-cifar",
        width=None,
        batch_size=None,
        buffer_size=None,
        task=1,
        device="cpu",
        steps=1,
        warmup=0,
        epoch=False,
    )
    payload = run_bench(options)
    settings = payload["settings"]
    assert (settings["protocol"], settings["width"], settings["batch_size"]) == ("laptop", 8, 32)
    assert (settings["buffer_size"], settings["protocol_epochs"]) == (buffer_size, 2)
    assert payload["methods"][0]["images_per_step"] == 64  # 32 stream + 32 replayed


def test_methods_that_fill_their_memory_at_a_tasks_end_are_benched_with_it() -> None:
    """GEM writes its episodic memory in end_task (buffer 40 over seq-digits' 5 tasks: 8 items a
    task), so the bench brings it to task 1 through end_task: a step then passes the 8 stream
    images and task 0's 8 memory items (16), where a memory left empty would give 8."""
    payload = run_bench(_options(methods=("gem",), epoch=False))
    (row,) = payload["methods"]
    assert row["images_per_step"] == 16


@pytest.mark.parametrize(
    ("compile", "mode"), [(False, "default"), (True, "default"), (True, "reduce-overhead")]
)
def test_the_backbone_is_compiled_in_the_asked_mode(compile: bool, mode: str, monkeypatch) -> None:
    """``train.compile`` and ``train.compile_mode`` reach ``nn.Module.compile`` (recorded, not run:
    compiling takes minutes on a CPU)."""
    from xder_cli.runs.build import build_network

    modes = []

    def compile_(self, **kw) -> None:  # recorded, and the call left as it is
        modes.append(kw.get("mode"))
        self._compiled_call_impl = self._call_impl

    monkeypatch.setattr(torch.nn.Module, "compile", compile_)
    plan = bench.bench_plan("derpp", _options(("train.compile", compile), ("train.compile_mode", mode)))
    assert (plan.schedule.compile, plan.schedule.compile_mode) == (compile, mode)
    build_network(plan, 10, torch.device("cpu"))
    assert modes == ([mode] if compile else [])


def test_a_network_run_as_cuda_graphs_hands_out_copies_of_outputs_made_without_grad(monkeypatch) -> None:
    """A stand-in for the compiled call returns one fixed tensor, as a CUDA graph returns its
    static output memory: without gradients each call gets its own copy (equal, not the same
    memory), with them the graph's tensor itself."""
    from xder_cli.runs.build import build_network

    static = torch.arange(6.0).reshape(2, 3)
    monkeypatch.setattr(
        torch.nn.Module, "compile", lambda self, **kw: setattr(self, "_compiled_call_impl", lambda *a: static)
    )
    graphs = (("train.compile", True), ("train.compile_mode", "reduce-overhead"))
    plan = bench.bench_plan("derpp", _options(*graphs))
    net = build_network(plan, 10, torch.device("cpu"))
    x = torch.zeros(2, 3, 32, 32)
    with torch.no_grad():
        first, second = net(x), net(x)
    assert torch.equal(first, static)
    assert torch.equal(second, static)
    assert len({t.data_ptr() for t in (first, second, static)}) == 3
    assert net(x) is static
    # default mode: torch's outputs as they are
    plan = bench.bench_plan("derpp", _options(("train.compile", True)))
    net = build_network(plan, 10, torch.device("cpu"))
    with torch.no_grad():
        assert net(x) is static


def test_timing_order_interleaves_rounds_or_blocks_each_network() -> None:
    """By hand, two methods, one warm-up round and two timed ones: round by round by default; for
    CUDA graphs each method's steps in a row, then its floor's (warm-up first, then timed)."""
    interleaved = bench.timing_order(["er", "xder"], 1, 2, blocked=False)
    round_ = [("er", "step"), ("er", "floor"), ("xder", "step"), ("xder", "floor")]
    assert interleaved == [(timed, *call) for timed in (False, True, True) for call in round_]
    blocked = bench.timing_order(["er", "xder"], 1, 2, blocked=True)
    assert blocked == [
        (False, "er", "step"), (False, "er", "floor"), (False, "xder", "step"), (False, "xder", "floor"),
        (True, "er", "step"), (True, "er", "step"), (True, "er", "floor"), (True, "er", "floor"),
        (True, "xder", "step"), (True, "xder", "step"), (True, "xder", "floor"), (True, "xder", "floor"),
    ]  # fmt: skip


def test_a_compiled_step_is_counted_on_an_eager_twin_and_runs_under_no_op_counter(monkeypatch) -> None:
    """With ``compile`` (stood in for by a call that checks it runs under no dispatch mode and
    no hook), the images, ops and host syncs of a step are those of the eager step."""
    from torch.utils._python_dispatch import _get_current_dispatch_mode

    calls = []

    def compile_(self, **kw) -> None:
        def call(*args, **kwargs):
            assert _get_current_dispatch_mode() is None
            assert not self._forward_pre_hooks
            calls.append(1)
            return self._call_impl(*args, **kwargs)

        self._compiled_call_impl = call

    monkeypatch.setattr(torch.nn.Module, "compile", compile_)
    eager = run_bench(_options(methods=("derpp",), epoch=False))
    graphs = _options(
        ("train.compile", True), ("train.compile_mode", "reduce-overhead"), methods=("derpp",), epoch=False
    )
    compiled = run_bench(graphs)
    assert calls  # the compiled call was timed
    keys = ("images_per_step", "ops_per_step", "launches_per_step", "host_syncs_per_step")
    assert [compiled["methods"][0][k] for k in keys] == [eager["methods"][0][k] for k in keys]
    assert eager["methods"][0]["ops_per_step"] > 0
    assert isinstance(compiled["cudagraph_counters"], dict)


def test_the_synthetic_epoch_is_the_training_loops_own(monkeypatch) -> None:
    """The bench's epoch runs :func:`xder_methods.run_epoch` (the loop's), once per method, on
    task T's rows with the run's schedule (gradient-norm probes off, as a run without analyses)."""
    calls = []
    real = bench.run_epoch

    def recorded(loop, task, epoch, rows, bounds, calls_=()):
        calls.append((task, epoch, rows.shape[0], len(bounds), loop.schedule.record_every))
        return real(loop, task, epoch, rows, bounds, calls_)

    monkeypatch.setattr(bench, "run_epoch", recorded)
    payload = run_bench(_options(methods=("er", "derpp"), steps=1))
    assert calls == [(1, 0, 288, 36, 0)] * 2  # 144 items per class x 2 classes, batch 8
    assert [r["epoch_steps"] for r in payload["methods"]] == [36, 36]


def test_steps_are_the_loops_own_and_replayed_with_step_graph(monkeypatch) -> None:
    """The timed steps run :func:`xder_methods.run_step`; with ``step_graph`` those of a method
    that declares its step replayable are recorded and then replayed (on a CPU: checked op by op),
    and the payload says how many; the floors are replayed too. The step's counts are of an eager
    step (the first steps of a key are its warm-up), so they equal those without step graphs."""
    floors = []

    class Recorded(bench.StepGraphs):
        def __init__(self, method, *args, **kwargs) -> None:
            super().__init__(method, *args, **kwargs)
            if isinstance(method, bench._Floor):
                floors.append(self)

    monkeypatch.setattr(bench, "StepGraphs", Recorded)
    plain = run_bench(_options(methods=("derpp", "xder", "er_ace"), steps=4, warmup=1))
    assert floors == []
    methods = ("derpp", "xder", "er_ace")
    replayed = run_bench(_options(("train.step_graph", True), methods=methods, steps=4, warmup=1))
    # 5 rounds of each floor: 3 warm-up, 1 recorded, 1 replayed
    assert [(f.records, f.replays) for f in floors] == [(1, 1)] * 3
    assert replayed["settings"]["step_graph"] is True
    # Two steps counted (images, then ops) and 5 rounds: 3 warm-up steps of the key, 1 recorded,
    # 3 replayed; then the epoch's 36 steps, all replayed: the same key, as the steps run at the
    # epoch's lr (the plan's, the loop's optimiser's). ER-ACE does not declare its step replayable.
    assert [r["replayed_steps"] for r in replayed["methods"]] == [3 + 36, 3 + 36, 0]
    assert [r["replayed_steps"] for r in plain["methods"]] == [None, None, None]
    for key in ("ops_per_step", "launches_per_step", "images_per_step", "host_syncs_per_step"):
        assert [r[key] for r in replayed["methods"]] == [r[key] for r in plain["methods"]]


def test_a_method_setting_reaches_the_methods_that_have_it() -> None:
    """``--set method.replay_forward=joint``: DER++'s stream batch and two buffer batches go
    through the backbone in one pass (3 calls a step become 1, the same 24 images); FT, which has
    no such setting, is measured as it is."""
    from xder_data import benchmark_defaults

    calls: dict[str, list[int]] = {}
    for forward in ("separate", "joint"):
        options = _options(settings=(("method.replay_forward", forward),))
        defaults = benchmark_defaults(options.benchmark, bench.DEFAULT_PROTOCOL)
        at = bench.method_at_task("derpp", with_protocol(options, defaults), torch.device("cpu"))
        assert at.method.config.replay_forward == forward
        calls[forward] = []
        at.net.register_forward_pre_hook(
            lambda module, inputs, f=forward: calls[f].append(inputs[0].shape[0])
        )
        at.step()
    assert calls == {"separate": [8, 8, 8], "joint": [24]}
    joint = (("method.replay_forward", "joint"),)
    payload = run_bench(_options(methods=("sgd", "derpp"), epoch=False, settings=joint))
    assert payload["settings"]["method_settings"] == {"method.replay_forward": "joint"}
    assert [r["images_per_step"] for r in payload["methods"]] == [8, 24]


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ((("run.seed", 1),), "training and method settings only"),
        ((("method.replay_forward", "joint"),), "none of the measured methods (er)"),
    ],
)
def test_a_setting_no_measured_method_takes_is_an_error(settings, message: str) -> None:
    from xder_cli.runs.errors import SettingError

    with pytest.raises(SettingError, match=message.replace("(", r"\(").replace(")", r"\)")):
        run_bench(_options(methods=("er",), settings=settings))


def test_the_steps_are_the_loops_optimiser_at_the_plans_lr() -> None:
    """The bench's method steps by the loop's own optimiser (xder_methods.make_optimizer) with the
    plan's settings: the protocol's lr, or what ``--set train.*`` gives."""
    from xder_data import benchmark_defaults

    def optimiser(*train: tuple[str, object]) -> torch.optim.Optimizer:
        options = with_protocol(_options(*train), benchmark_defaults("seq-digits", bench.DEFAULT_PROTOCOL))
        at = bench.method_at_task("derpp", options, torch.device("cpu"))
        assert at.loop.optimizer is not None
        return at.loop.optimizer

    protocol_lr = benchmark_defaults("seq-digits", bench.DEFAULT_PROTOCOL).lr
    plain = optimiser()
    assert isinstance(plain, torch.optim.SGD)
    assert [g["lr"] for g in plain.param_groups] == [protocol_lr]
    assert protocol_lr != 0.2
    faster = optimiser(("train.lr", 0.2), ("train.momentum", 0.5))
    assert [(g["lr"], g["momentum"]) for g in faster.param_groups] == [(0.2, 0.5)]
    assert isinstance(optimiser(("train.optimizer", "radam")), torch.optim.RAdam)


def test_train_settings_reach_every_measured_methods_plan() -> None:
    """``--set train.KEY=VALUE``, as ``xder-run train`` takes it, reaches every method's plan."""
    options = _options(("train.precision", "bf16"), ("train.channels_last", True), ("train.step_graph", True))
    for name in ("sgd", "er", "xder"):
        schedule = bench.bench_plan(name, options).schedule
        assert (schedule.precision, schedule.channels_last, schedule.step_graph) == ("bf16", True, True)
    plain = bench.bench_plan("er", _options()).schedule
    assert (plain.precision, plain.channels_last, plain.step_graph) == ("fp32", False, False)


def test_the_fields_the_protocol_fills_are_the_declared_ones() -> None:
    """The bench's buffer and batch fill the method fields the method's config declares the
    protocol fills: ER's buffer and replay batch; GDumb's buffer, not its fitting batch (a field
    of its own that the stream's batch size is not); nothing for FT."""
    options = _options(buffer_size=40, batch_size=8)
    er = bench.bench_plan("er", options).method_config
    assert (er.buffer_size, er.minibatch_size) == (40, 8)
    gdumb = bench.bench_plan("gdumb", options).method_config
    assert (gdumb.buffer_size, gdumb.batch_size) == (40, type(gdumb)().batch_size)
    assert bench.bench_plan("sgd", options).config["method"] == {}


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        (("train.nope", 1), "train.nope is not a setting"),
        (("train.precision", "fp16"), "train.precision"),
        (("train.step_graph", "often"), "train.step_graph"),
    ],
)
def test_a_bad_training_setting_is_refused_before_anything_is_measured(setting, message: str) -> None:
    from xder_cli.runs.errors import SettingError

    with pytest.raises(SettingError, match=message):
        run_bench(_options(setting, methods=("sgd", "er")))
