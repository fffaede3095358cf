"""Every shipped preset resolves into a valid configuration of the method it names, and the paper
preset holds the appendix's values."""

from __future__ import annotations

from pathlib import Path

import pytest

from xder_cli.runs.errors import SettingError
from xder_cli.runs.presets import (
    PresetEntry,
    default_preset,
    list_presets,
    preset_entries,
    preset_entry,
    preset_values,
)
from xder_cli.runs.settings import build_plan, resolve_config
from xder_data import benchmark_defaults
from xder_methods import method_config_class


def _all_entries() -> list[PresetEntry]:
    return [e for name in list_presets() if name != "none" for e in preset_entries(name)]


def _config(entry: PresetEntry, preset: str, sets: dict[str, object] | None = None) -> dict:
    settings = {} if entry.buffer_size is None else {"method.buffer_size": entry.buffer_size}
    return resolve_config(
        entry.method,
        entry.benchmark,
        protocol=entry.protocol,
        preset=preset,
        settings=settings | (sets or {}),
    )


DER_PAPER = ("seq-cifar10", "seq-mnist", "seq-tinyimg", "perm-mnist", "rot-mnist", "mnist-360")
"""The DER paper's benchmarks: their paper entries are its values (mammoth's best_args), not the
X-DER paper's appendix."""


def test_presets_are_shipped() -> None:
    assert {"none", "paper", "tuned"} <= set(list_presets())
    assert _all_entries()


@pytest.mark.parametrize(
    "entry", _all_entries(), ids=lambda e: f"{e.preset}:{e.benchmark}:{e.protocol}:{e.buffer_size}:{e.name}"
)
def test_every_preset_entry_builds_its_chosen_values(entry: PresetEntry) -> None:
    preset = entry.preset if entry.name == entry.method else f"{entry.preset}:{entry.name}"
    plan = build_plan(_config(entry, preset))
    for dotted, value in entry.chosen.items():
        section, key = dotted.split(".", 1)
        assert plan.config[section][key] == value, dotted
    assert plan.settings.preset == preset
    schedule = plan.schedule  # every milestone of the resolved run takes effect within its epochs
    assert all(0 < m < schedule.epochs for m in schedule.milestones), (schedule.milestones, schedule.epochs)


@pytest.mark.parametrize(
    "entry", _all_entries(), ids=lambda e: f"{e.preset}:{e.benchmark}:{e.protocol}:{e.buffer_size}:{e.name}"
)
def test_every_grid_point_of_every_entry_is_a_valid_setting(entry: PresetEntry) -> None:
    """Each searched value, set alone over the chosen ones, builds (types and ranges)."""
    preset = entry.preset if entry.name == entry.method else f"{entry.preset}:{entry.name}"
    assert set(entry.chosen) >= set(entry.grid), "every searched key has a chosen value"
    for dotted, values in entry.grid.items():
        assert entry.chosen[dotted] in values, f"{dotted}: the chosen value is one of the grid's"
        for value in values:
            build_plan(_config(entry, preset, {dotted: value}))


# The methods' own batch sizes that the authors' code takes from the stream batch (``args.batch_size``).
BATCH_TIED = {
    "gdumb": "batch_size",  # its fitting on the memory
    "lucir": "fitting_batch_size",  # its class-balanced fine-tuning
    "bic": "bias_batch_size",  # its bias stage's validation loader
    "xder": "forward_batch_size",  # its task-end forward passes (BatchNorm statistics per chunk)
}


def test_every_batch_the_authors_tie_to_the_stream_batch_follows_the_protocol() -> None:
    """On every benchmark and protocol (Split miniImageNet: 128), each preset entry's batch
    settings that the authors' code takes from its stream batch equal the protocol's batch."""
    checked = 0
    for entry in _all_entries():
        field = BATCH_TIED.get(entry.method)
        if field is None:
            continue
        preset = entry.preset if entry.name == entry.method else f"{entry.preset}:{entry.name}"
        config = _config(entry, preset)
        default = getattr(method_config_class(entry.method)(), field)
        assert config["method"].get(field, default) == config["train"]["batch_size"], (entry, field)
        checked += 1
    assert checked > 40


@pytest.mark.parametrize("preset", ["paper", "tuned"])
def test_protocol_tables_equal_the_benchmark_defaults(preset: str) -> None:
    seen = {(e.benchmark, e.protocol): e.fixed for e in preset_entries(preset)}
    assert seen
    for (benchmark, protocol), fixed in seen.items():
        defaults = benchmark_defaults(benchmark, protocol)
        assert fixed, f"{benchmark} has no protocol table"
        for dotted, value in fixed.items():
            key = dotted.split(".", 1)[1]
            expected = getattr(defaults, key)
            assert (list(expected) if isinstance(expected, tuple) else expected) == value, (benchmark, key)


def test_paper_values_spot_checked_against_the_appendix() -> None:
    """A few cells read off App. "Hyperparameter Choice" by hand."""
    xder = preset_entry("paper", "seq-cifar100", 500, "xder")
    assert xder.chosen["method.margin"] == 0.7
    assert xder.chosen["method.alpha"] == 0.3
    assert xder.grid["train.lr"] == [5e-3, 0.03, 0.1, 0.3]
    assert preset_entry("paper", "seq-cifar100", 2000, "xder").chosen["method.eta"] == 0.01
    assert preset_entry("paper", "seq-miniimg", 5000, "lucir").chosen["method.lr_fitting"] == 0.03
    for entry in preset_entries("paper"):  # the authors' code fine-tunes LUCIR with the run's mom and wd
        if entry.method == "lucir":
            assert entry.chosen["method.momentum_fitting"] == entry.chosen["train.momentum"], entry
            assert entry.chosen["method.weight_decay_fitting"] == entry.chosen["train.weight_decay"], entry
    assert preset_entry("paper", "seq-ntu60", 500, "bic").chosen["method.epochs_bic"] == 150
    gdumb = preset_entry("paper", "seq-ntu60", 500, "gdumb")
    assert gdumb.chosen["method.epochs_fitting"] == 256
    assert gdumb.chosen["method.cutmix_probability"] == 0
    assert preset_entry("paper", "seq-miniimg", None, "lwf_mc").chosen["train.lr"] == 0.3
    # The authors' wd_reg (a loss term wd_reg * sum(theta^2)) as SGD's weight decay, 2 * wd_reg:
    # LwF.MC's (its code requires wd_reg) and BiC's at 2000 (their SGD's chosen value there is 0).
    lwf_mc = preset_entry("paper", "seq-cifar100", None, "lwf_mc")
    assert lwf_mc.chosen["train.weight_decay"] == 2 * 5e-4
    assert lwf_mc.grid["train.weight_decay"] == [0, 2 * 1e-5, 2 * 5e-4]
    assert preset_entry("paper", "seq-miniimg", None, "lwf_mc").chosen["train.weight_decay"] == 2 * 1e-5
    assert preset_entry("paper", "seq-cifar100", 2000, "bic").chosen["train.weight_decay"] == 2 * 5e-5
    assert preset_entry("paper", "seq-cifar100", 500, "bic").chosen["train.weight_decay"] == 0
    rpc = preset_entry("paper", "seq-cifar100", 2000, "xder-rpc")
    assert rpc.method == "xder"
    assert rpc.chosen["method.future_heads"] == "rpc"
    entries = [e for e in preset_entries("paper") if e.benchmark not in DER_PAPER and e.protocol == "full"]
    assert len({(e.benchmark, e.buffer_size) for e in entries if e.buffer_size}) == 5
    assert len([e for e in entries if e.buffer_size]) == 5 * 14  # ER ... DER++, X-DER and its 4 variants


def test_der_paper_values_on_seq_cifar10() -> None:
    """The DER paper's Seq-CIFAR-10 choices (App. F; mammoth's best_args.py), as the issue lists them."""
    derpp = {m: preset_entry("paper", "seq-cifar10", m, "derpp").chosen for m in (200, 500, 5120)}
    assert [(c["method.alpha"], c["method.beta"], c["train.lr"]) for c in derpp.values()] == [
        (0.1, 0.5, 0.03),
        (0.2, 0.5, 0.03),
        (0.1, 1.0, 0.03),
    ]
    for m in (200, 500, 5120):
        assert preset_entry("paper", "seq-cifar10", m, "er").chosen == {"train.lr": 0.1}
        der = preset_entry("paper", "seq-cifar10", m, "der").chosen
        assert der == {"train.lr": 0.03, "method.alpha": 0.3}
        icarl = preset_entry("paper", "seq-cifar10", m, "icarl").chosen
        # The DER paper's iCaRL adds wd_reg * sum(theta^2) to its loss, wd_reg = 1e-5: SGD's 2e-5.
        assert icarl == {"train.lr": 0.1 if m < 5120 else 0.03, "train.weight_decay": 2e-5}
    assert preset_entry("paper", "seq-cifar10", None, "sgd").chosen == {"train.lr": 0.1}
    # JOINT: the authors' utils/main.py runs joint on best_args' sgd entry; the laptop protocol
    # keeps it on the protocol's lr (its measured tables ran so)
    assert preset_entry("paper", "seq-cifar10", None, "joint").chosen == {"train.lr": 0.1}
    assert default_preset("seq-cifar10", "joint", None, "laptop") == "none"
    # The paper preset is the default there, and the protocol is the DER paper's.
    plan = build_plan(resolve_config("derpp", "seq-cifar10", preset=None))
    assert plan.settings.preset == "paper"
    assert (plan.method_config.alpha, plan.method_config.beta, plan.schedule.lr) == (0.1, 0.5, 0.03)
    assert (plan.schedule.epochs, plan.schedule.batch_size, plan.schedule.drop_last) == (50, 32, False)
    assert plan.buffer_size == 200
    assert plan.backbone["width"] == 64


def test_agem_r_paper_values_on_seq_cifar10_and_no_mer_entry() -> None:
    """mammoth's best_args, seq-cifar10, agem_r: lr 0.03 at every buffer (batch, minibatch 32 and
    50 epochs: the protocol's); they hold no mer entry there."""
    for m in (200, 500, 5120):
        assert preset_entry("paper", "seq-cifar10", m, "agem_r").chosen == {"train.lr": 0.03}
        assert default_preset("seq-cifar10", "agem_r", m) == "paper"
        assert default_preset("seq-cifar10", "mer", m) == "none"
    plan = build_plan(
        resolve_config("agem_r", "seq-cifar10", preset=None, settings={"method.buffer_size": 500})
    )
    assert (plan.schedule.lr, plan.schedule.epochs, plan.schedule.batch_size) == (0.03, 50, 32)
    assert (plan.method_config.buffer_size, plan.method_config.minibatch_size) == (500, 32)


# The DER paper's other benchmarks: the methods of mammoth's best_args (tag neurips2020), written out
# by hand: those without a buffer (with joint, which the authors' utils/main.py runs on sgd's entry)
# and those at each buffer size; PNN (Task-IL only) on seq-mnist and seq-tinyimg.
DER_PAPER_ENTRIES: dict[str, tuple[set[str], tuple[int, ...], set[str]]] = {
    "seq-mnist": (
        {"sgd", "joint", "ewc_on", "si", "lwf", "pnn"},
        (200, 500, 5120),
        {"er", "mer", "gem", "agem", "agem_r", "icarl", "fdr", "gss", "hal", "der", "derpp"},
    ),
    "seq-tinyimg": (
        {"sgd", "joint", "ewc_on", "si", "lwf", "pnn"},
        (200, 500, 5120),
        {"er", "agem", "agem_r", "icarl", "fdr", "der", "derpp"},
    ),
    "perm-mnist": (
        {"sgd", "joint", "ewc_on", "si"},
        (200, 500, 5120),
        {"er", "gem", "agem", "agem_r", "fdr", "gss", "hal", "der", "derpp"},
    ),
    "rot-mnist": (
        {"sgd", "joint", "ewc_on", "si"},
        (200, 500, 5120),
        {"er", "gem", "agem", "agem_r", "fdr", "gss", "hal", "der", "derpp"},
    ),
    "mnist-360": ({"sgd", "joint"}, (200, 500, 1000), {"er", "mer", "agem_r", "der", "derpp"}),
}


@pytest.mark.parametrize("benchmark", list(DER_PAPER_ENTRIES))
def test_der_paper_entries_are_best_args_whole(benchmark: str) -> None:
    unbuffered, sizes, buffered = DER_PAPER_ENTRIES[benchmark]
    entries = [e for e in preset_entries("paper") if (e.benchmark, e.protocol) == (benchmark, "full")]
    assert {e.name for e in entries if e.buffer_size is None} == unbuffered
    assert sorted({e.buffer_size for e in entries if e.buffer_size is not None}) == list(sizes)
    for size in sizes:
        assert {e.name for e in entries if e.buffer_size == size} == buffered, size
    assert all(e.name == e.method and not e.grid for e in entries)  # chosen values only, no variants
    # JOINT runs on sgd's values, as the authors' utils/main.py gives it best_args[dataset]['sgd']
    joint, sgd = (preset_entry("paper", benchmark, None, name) for name in ("joint", "sgd"))
    assert joint.chosen == sgd.chosen


def _resolved(method: str, benchmark: str, buffer_size: int | None):  # type: ignore[no-untyped-def]
    settings = {} if buffer_size is None else {"method.buffer_size": buffer_size}
    plan = build_plan(resolve_config(method, benchmark, preset=None, settings=settings))
    assert plan.settings.preset == "paper"
    return plan


def test_der_paper_values_on_seq_mnist_and_seq_tinyimg_are_best_args() -> None:
    """A handful of cells read off mammoth's utils/best_args.py (neurips2020) by hand, as the runs
    resolve them (the protocol's batch, replay batch and epochs where the entry gives none)."""
    derpp = _resolved("derpp", "seq-mnist", 5120)  # lr 0.1, minibatch 64, alpha 0.2, beta 0.5, batch 10
    assert (derpp.schedule.lr, derpp.schedule.batch_size, derpp.schedule.epochs) == (0.1, 10, 1)
    assert (derpp.method_config.minibatch_size, derpp.method_config.alpha, derpp.method_config.beta) == (
        64,
        0.2,
        0.5,
    )
    der = _resolved("der", "seq-mnist", 200)  # lr 0.03, minibatch 10, alpha 0.2, batch 10
    assert (der.schedule.lr, der.method_config.minibatch_size, der.method_config.alpha) == (0.03, 10, 0.2)
    mer = _resolved("mer", "seq-mnist", 5120)  # lr 0.03, minibatch 128, batch_num 1; batch 1 (main.py)
    assert (mer.schedule.lr, mer.schedule.batch_size, mer.method_config.minibatch_size) == (0.03, 1, 128)
    hal = _resolved("hal", "seq-mnist", 500)  # lr 0.1, batch 128, minibatch 128, hal_lambda 0.1, beta 0.2
    assert (hal.schedule.batch_size, hal.method_config.minibatch_size) == (128, 128)
    assert (hal.method_config.lambda_, hal.method_config.beta, hal.method_config.gamma) == (0.1, 0.2, 0.5)
    assert hal.method_config.finetuning_batch_size == 128  # hal.py fine-tunes on args.batch_size items
    gss = _resolved("gss", "seq-mnist", 200)  # lr 0.1, batch 128, minibatch 10, gss_minibatch 10
    assert (
        gss.schedule.batch_size,
        gss.method_config.minibatch_size,
        gss.method_config.gss_minibatch_size,
    ) == (
        128,
        10,
        10,
    )
    fdr = _resolved("fdr", "seq-mnist", 200)  # best_args' alpha 0.5 is never read: weight 1
    assert (fdr.schedule.lr, fdr.schedule.batch_size, fdr.method_config.alpha) == (0.03, 128, 1.0)
    assert _resolved("gem", "seq-mnist", 500).method_config.gamma == 0.5
    ewc = _resolved("ewc_on", "seq-mnist", None)  # e_lambda 90
    assert (ewc.schedule.lr, ewc.method_config.lambda_, ewc.method_config.gamma) == (0.03, 90, 1.0)
    lwf = _resolved("lwf", "seq-tinyimg", None)  # lr 0.01, alpha 1, softmax_temp 2, wd_reg 0.0005
    assert (lwf.schedule.lr, lwf.method_config.alpha, lwf.method_config.tau) == (0.01, 1.0, 2.0)
    assert lwf.schedule.weight_decay == 2 * 0.0005
    icarl = _resolved("icarl", "seq-tinyimg", 200)  # lr 0.03, wd_reg 1e-5
    assert (icarl.schedule.lr, icarl.schedule.weight_decay, icarl.schedule.epochs) == (0.03, 2e-5, 100)
    assert _resolved("er", "seq-tinyimg", 500).schedule.lr == 0.03  # 0.1 at 200 and 5120
    assert _resolved("er", "seq-tinyimg", 5120).schedule.lr == 0.1
    tiny = _resolved("derpp", "seq-tinyimg", 200)
    assert (tiny.method_config.alpha, tiny.method_config.beta, tiny.schedule.batch_size) == (0.1, 1.0, 32)
    assert _resolved("joint", "seq-mnist", None).schedule.lr == 0.03  # sgd's


def test_der_paper_values_on_perm_mnist_rot_mnist_and_mnist_360_are_best_args() -> None:
    """More cells read off best_args (neurips2020) by hand: the Domain-IL benchmarks (batch and
    replay batch 128, one epoch) and the MNIST-360 stream (each entry its own batches)."""
    derpp = _resolved("derpp", "perm-mnist", 200)  # lr 0.1, alpha 1.0, beta 1.0, batch 128, minibatch 128
    assert (derpp.schedule.lr, derpp.method_config.alpha, derpp.method_config.beta) == (0.1, 1.0, 1.0)
    assert (derpp.schedule.batch_size, derpp.method_config.minibatch_size, derpp.schedule.epochs) == (
        128,
        128,
        1,
    )
    derpp = _resolved("derpp", "perm-mnist", 500)  # lr 0.2, alpha 1.0, beta 0.5
    assert (derpp.schedule.lr, derpp.method_config.alpha, derpp.method_config.beta) == (0.2, 1.0, 0.5)
    gss = _resolved("gss", "perm-mnist", 200)  # lr 0.2, minibatch 10, gss_minibatch 128
    assert (gss.schedule.lr, gss.method_config.minibatch_size, gss.method_config.gss_minibatch_size) == (
        0.2,
        10,
        128,
    )
    assert _resolved("gss", "perm-mnist", 5120).schedule.lr == 0.03
    ewc = _resolved("ewc_on", "perm-mnist", None)  # lr 0.1, e_lambda 0.7
    assert (ewc.schedule.lr, ewc.method_config.lambda_) == (0.1, 0.7)
    assert _resolved("sgd", "rot-mnist", None).schedule.lr == 0.2
    si = _resolved("si", "rot-mnist", None)  # c 1.0 here (0.5 on perm-mnist)
    assert (si.method_config.c, si.method_config.xi) == (1.0, 1.0)
    assert _resolved("gem", "rot-mnist", 500).schedule.lr == 0.01
    assert [_resolved("agem_r", "rot-mnist", m).schedule.lr for m in (200, 500, 5120)] == [0.1, 0.3, 0.3]
    hal = _resolved("hal", "rot-mnist", 200)  # hal_lambda 0.2, beta 0.5, gamma 0.1
    assert (hal.method_config.lambda_, hal.method_config.beta, hal.method_config.finetuning_batch_size) == (
        0.2,
        0.5,
        128,
    )
    derpp = _resolved("derpp", "rot-mnist", 5120)  # lr 0.2, alpha 0.5, beta 0.5
    assert (derpp.schedule.lr, derpp.method_config.alpha, derpp.method_config.beta) == (0.2, 0.5, 0.5)
    er = _resolved("er", "mnist-360", 1000)  # lr 0.2, batch 4, minibatch 16 (batch 1 at 200 and 500)
    assert (er.schedule.lr, er.schedule.batch_size, er.method_config.minibatch_size) == (0.2, 4, 16)
    assert _resolved("er", "mnist-360", 200).schedule.batch_size == 1
    der = _resolved("der", "mnist-360", 200)  # lr 0.1, batch 16, minibatch 64, alpha 0.5
    assert (der.schedule.lr, der.schedule.batch_size, der.method_config.minibatch_size) == (0.1, 16, 64)
    mer = _resolved("mer", "mnist-360", 500)  # lr 0.1, minibatch 128, batch_num 3; batch 1 (main.py)
    assert (mer.schedule.lr, mer.schedule.batch_size, mer.method_config.batch_num) == (0.1, 1, 3)
    derpp = _resolved("derpp", "mnist-360", 1000)  # lr 0.2, batch 16, minibatch 128, alpha 0.2, beta 1.0
    assert (derpp.method_config.minibatch_size, derpp.method_config.alpha, derpp.method_config.beta) == (
        128,
        0.2,
        1.0,
    )
    assert _resolved("agem_r", "mnist-360", 1000).schedule.batch_size == 4
    joint = _resolved("joint", "mnist-360", None)  # joint_gcl on sgd's entry: lr 0.1, batch 4
    assert (joint.schedule.lr, joint.schedule.batch_size) == (0.1, 4)


def test_seq_cifar100_laptop_carries_the_paper_m500_values_unselected() -> None:
    """Under ``--protocol laptop`` every Split CIFAR-100 entry of the paper at M = 500 (and each
    entry without a buffer) comes over with its chosen values and no grid, under the laptop protocol
    table (2 epochs, milestones 1.4 and 1.8)."""

    def table(preset: str, protocol: str) -> dict:
        return {
            (e.buffer_size, e.name): e
            for e in preset_entries(preset)
            if (e.benchmark, e.protocol) == ("seq-cifar100", protocol) and e.buffer_size in (None, 500)
        }

    paper, laptop = table("paper", "full"), table("paper", "laptop")
    assert set(laptop) == set(paper)
    assert len(laptop) == 2 + 14  # sgd, lwf_mc; ER ... DER++, X-DER and its 4 variants
    for key, entry in laptop.items():
        assert (entry.method, entry.chosen, entry.grid) == (paper[key].method, paper[key].chosen, {}), key
    fixed = laptop[500, "xder"].fixed
    assert all(e.fixed == fixed for e in laptop.values())
    assert (fixed["train.epochs"], fixed["train.milestones"]) == (2, [1.4, 1.8])
    assert default_preset("seq-cifar100", "bic", 500, "laptop") == "paper"  # not selected
    assert default_preset("seq-cifar100", "xder", 2000, "laptop") == "none"  # only M = 500 is carried


SELECTED_ON_CIFAR100_LAPTOP = ("xder", "derpp", "er", "er_ace", "der", "icarl")
XDER_ABLATIONS = {
    "xder-no-memory-update": {"method.memory_update": False},
    "xder-no-future-heads": {"method.future_heads": "none"},
    "xder-ce": {"method.future_heads": "ce"},
    "xder-rpc": {"method.future_heads": "rpc"},
}


def test_seq_cifar100_laptop_tuned_entries_changed_only_their_grids_keys_with_an_equal_budget() -> None:
    """The tuned laptop entries at M = 500: each selected method's chosen values are the paper's
    with the two searched keys replaced by a point of its grid of 2 x 2 values (the same budget for
    every method); each X-DER ablation is X-DER's choice with only its own switch changed; the
    protocol table is the paper preset's."""
    tuned = {
        e.name: e
        for e in preset_entries("tuned")
        if (e.benchmark, e.protocol, e.buffer_size) == ("seq-cifar100", "laptop", 500)
    }
    assert set(tuned) == set(SELECTED_ON_CIFAR100_LAPTOP) | set(XDER_ABLATIONS)
    for name in SELECTED_ON_CIFAR100_LAPTOP:
        entry, paper = tuned[name], preset_entry("paper", "seq-cifar100", 500, name, protocol="laptop")
        assert entry.fixed == paper.fixed
        assert sorted(len(values) for values in entry.grid.values()) == [2, 2], name
        assert all(entry.chosen[key] in values for key, values in entry.grid.items()), name
        unsearched = {k: v for k, v in entry.chosen.items() if k not in entry.grid}
        assert unsearched == {k: v for k, v in paper.chosen.items() if k not in entry.grid}, name
        assert default_preset("seq-cifar100", name, 500, "laptop") == "tuned"
    for name, switch in XDER_ABLATIONS.items():
        assert tuned[name].method == "xder"
        assert tuned[name].chosen == tuned["xder"].chosen | switch, name


# Re-selected on seq-cifar10 with the equal budget -> the preset each grid starts from.
SELECTED_ON_CIFAR10_LAPTOP = {
    "er": "paper",
    "derpp": "paper",
    "xder": "none",
    "agem": "paper",
    "fdr": "paper",
    "hal": "paper",
    "gem": "paper",
    "gss": "paper",
}


def test_seq_cifar10_laptop_tuned_entries_changed_only_their_grids_keys_with_an_equal_budget() -> None:
    """The tuned laptop entries of seq-cifar10 at M = 200 (issue 23, item 8): each re-selected
    method's chosen values are its starting preset's (the DER paper's for ER and DER++, X-DER's
    own defaults) with the two searched keys replaced by a point of its 2 x 2 grid, the grids of
    examples/selection/seq-cifar10-laptop/."""
    from xder_cli.runs.sweep import load_spec

    tuned = {
        e.name: e
        for e in preset_entries("tuned")
        if (e.benchmark, e.protocol, e.buffer_size) == ("seq-cifar10", "laptop", 200)
    }
    assert set(tuned) == set(SELECTED_ON_CIFAR10_LAPTOP)
    grids = Path(__file__).resolve().parents[2] / "examples" / "selection" / "seq-cifar10-laptop"
    for name, start in SELECTED_ON_CIFAR10_LAPTOP.items():
        entry, spec = tuned[name], load_spec(grids / f"{name}.toml")
        assert (spec.preset, entry.grid) == (start, {k: list(v) for k, v in spec.grid.items()}), name
        assert all(entry.chosen[key] in values for key, values in entry.grid.items()), name
        started = {}
        if start != "none":
            started = preset_entry(start, "seq-cifar10", 200, name, protocol="laptop").chosen
        unsearched = {k: v for k, v in entry.chosen.items() if k not in entry.grid}
        assert unsearched == {k: v for k, v in started.items() if k not in entry.grid}, name
        assert default_preset("seq-cifar10", name, 200, "laptop") == "tuned"


def test_paper_preset_is_applied_by_default_where_it_has_an_entry() -> None:
    assert default_preset("seq-cifar100", "xder", 500) == "paper"
    assert default_preset("seq-cifar100", "xder", 1000) == "none"  # no such table in the paper
    assert default_preset("seq-ntu60", "sgd", None) == "paper"
    assert default_preset("seq-cub200", "xder", 500) == "none"
    plan = build_plan(resolve_config("er", "seq-cifar100", preset=None))
    assert plan.settings.preset == "paper"
    assert plan.schedule.lr == 0.1


def test_set_overrides_the_preset_and_buffer_size_picks_the_entry() -> None:
    settings = {"method.buffer_size": 2000, "method.alpha": 0.9}
    config = resolve_config("xder", "seq-cifar100", preset="paper", settings=settings)
    plan = build_plan(config)
    assert plan.method_config.alpha == 0.9
    assert plan.method_config.beta == 0.9  # M2000's choice, not M500's 0.8


def test_tuned_is_the_default_on_seq_digits_and_none_keeps_the_method_defaults() -> None:
    assert default_preset("seq-digits", "xder", 200) == "tuned"
    assert default_preset("seq-digits", "derpp", 200) == "tuned"
    assert default_preset("seq-digits", "er", 200) == "none"
    plain = build_plan(resolve_config("xder", "seq-digits", preset="none"))
    assert (plain.method_config.alpha, plain.method_config.beta, plain.method_config.margin) == (
        0.3,
        0.8,
        0.7,
    )


def test_the_buffer_size_picks_the_tuned_entry_on_seq_digits() -> None:
    assert default_preset("seq-digits", "xder", 20) == "tuned"
    assert default_preset("seq-digits", "derpp", 20) == "tuned"
    assert default_preset("seq-digits", "xder", 500) == "none"  # no entry for that size
    small = preset_values("tuned", "seq-digits", "xder", 20)
    large = preset_values("tuned", "seq-digits", "xder", 200)
    assert (small["method.alpha"], small["method.beta"], small["method.eta"]) == (0.6, 0.5, 0.03)
    assert (large["method.alpha"], large["method.beta"], large["method.eta"]) == (0.3, 0.8, 0.1)


def test_missing_entries_are_one_line_errors() -> None:
    with pytest.raises(SettingError, match="no entry 'er'"):
        preset_values("tuned", "seq-digits", "er", 200)
    with pytest.raises(SettingError, match="buffer sizes 500, 2000"):
        preset_values("paper", "seq-cifar100", "xder", 1000)
    with pytest.raises(SettingError, match="is for method 'xder', not 'er'"):
        preset_values("paper:xder-rpc", "seq-cifar100", "er", 500)
    with pytest.raises(SettingError, match="unknown preset"):
        preset_values("nope", "seq-cifar100", "er", 500)


@pytest.mark.parametrize(
    ("benchmark", "lr", "epochs", "batch_size"),
    [("seq-cifar10", 0.03, 50, 32), ("seq-mnist", 0.1, 1, 10), ("seq-tinyimg", 0.03, 100, 32)],
)
def test_pnn_paper_entries_run_the_benchmark_as_task_il(benchmark, lr, epochs, batch_size) -> None:
    """mammoth's best_args, pnn (no buffer): lr 0.03 / 0.1 / 0.03, batch and epochs the protocol's;
    the entry runs the class-il benchmark as task-il, the only scenario PNN accepts."""
    assert default_preset(benchmark, "pnn", None) == "paper"
    plan = build_plan(resolve_config("pnn", benchmark, preset=None, settings={}))
    assert plan.settings.scenario == "task-il"
    assert (plan.schedule.lr, plan.schedule.epochs, plan.schedule.batch_size) == (lr, epochs, batch_size)
