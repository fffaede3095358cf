"""The modes the GPU script benches and trains in, each once, as the ``--set`` settings both
``xder-run bench`` and ``xder-run train`` take (:data:`MODES`), and the full runs it can make
(:data:`FULL_RUNS`), beside the published values the library ships."""

from __future__ import annotations

from typing import Any

MODES: dict[str, tuple[str, ...]] = {
    "fp32": (),
    "bf16": ("train.precision=bf16",),
    "bf16-cl": ("train.precision=bf16", "train.channels_last=true"),
    # the backbone compiled into CUDA graphs (torch.compile's reduce-overhead mode), bf16 + channels-last
    "graphs": (
        "train.precision=bf16", "train.channels_last=true", "train.compile=true",
        "train.compile_mode=reduce-overhead",
    ),
    # whole training steps recorded as CUDA graphs and replayed, bf16 + channels-last
    "stepgraph": ("train.precision=bf16", "train.channels_last=true", "train.step_graph=true"),
    # the same in float32 (the papers' precision; torch's default on a GPU: TF32 convolutions)
    "stepgraph-fp32": ("train.channels_last=true", "train.step_graph=true"),
    # the same with DER's, DER++'s and X-DER's stream and buffer batches in one forward pass (not the
    # authors' code: BatchNorm sees them together), DER++ and X-DER only
    "stepgraph-joint": (
        "train.precision=bf16", "train.channels_last=true", "train.step_graph=true",
        "method.replay_forward=joint",
    ),
    # the same with those batches and X-DER's future-preparation views in one forward pass in which
    # BatchNorm keeps each batch apart (the authors' computation), DER++ and X-DER only
    "stepgraph-grouped": (
        "train.precision=bf16", "train.channels_last=true", "train.step_graph=true",
        "method.replay_forward=grouped",
    ),
    # the backbone compiled in torch's default mode, bf16 (the compile phase)
    "compile": ("train.precision=bf16", "train.compile=true"),
}  # fmt: skip
"""Each mode's settings (``section.key=value``), for the bench and for a training run alike."""
# Compiling costs tens of seconds a network on the GPU: those modes bench DER++ and X-DER only.
COMPILED_MODES = {"compile", "graphs"}
# Modes that change what a method computes (the authors' code forwards each batch apart): the full
# run takes one only when --full-run-mode names it.
NOT_THE_AUTHORS = {"stepgraph-joint"}
# The modes benched with DER++ and X-DER only: compiling, and changes to the replay's passes.
REPLAYING_METHODS_ONLY = COMPILED_MODES | NOT_THE_AUTHORS | {"stepgraph-grouped"}


def settings_args(mode: str) -> list[str]:
    """``mode``'s settings as the command line gives them: ``--set KEY=VALUE`` each."""
    return [arg for setting in MODES[mode] for arg in ("--set", setting)]


_FULL_RUNS: dict[str, dict[str, Any]] = {
    "derpp-cifar10": {
        "method": "derpp", "benchmark": "seq-cifar10", "data": "cifar10", "buffer_size": 200,
        "tasks": 5, "epochs": 50,
    },
    "xder-cifar100": {
        "method": "xder", "benchmark": "seq-cifar100", "data": "cifar100", "buffer_size": 500,
        "tasks": 10, "epochs": 50,
    },
}  # fmt: skip


def full_run_spec(which: str) -> dict[str, Any]:
    """The full run ``which`` (a key of :data:`FULL_RUNS`), with its paper's published Class-IL
    FAA (``published_faa``: mean and std, the std None where the paper gives none) and the table
    it is from (``published_in``), as the library ships them (``xder_cli.runs.published``)."""
    from xder_cli.runs.published import benchmark_paper, paper_name, published_at

    spec = dict(_FULL_RUNS[which])
    (cell,) = [r for r in published_at(spec["benchmark"], spec["buffer_size"]) if r.entry == spec["method"]]
    paper = benchmark_paper(spec["benchmark"])
    return spec | {
        "published_faa": (cell.faa, cell.faa_std),
        "published_in": paper_name(paper) if paper else cell.source,
    }


FULL_RUNS = tuple(_FULL_RUNS)
"""The full runs the script can make: DER++ on Split CIFAR-10 (buffer 200) and X-DER on Split
CIFAR-100 (buffer 500), each at its paper's protocol (:func:`full_run_spec`)."""
