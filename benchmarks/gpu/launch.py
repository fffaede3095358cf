"""``xder-run`` as the GPU script runs it: ``python launch.py [--deterministic] [--kill-after T,E] -- ARGS``.

* Ray, grad-cam and wandb are made unimportable first, so that a smoke run on a machine that has
  them proves the GPU machine (which has none of them) needs none of them either.
* ``--deterministic``: ``torch.use_deterministic_algorithms(True, warn_only=True)`` with
  ``CUBLAS_WORKSPACE_CONFIG=:4096:8`` (set before CUDA starts), so that an op without a
  deterministic CUDA kernel warns on stderr instead of failing the run.
* ``--kill-after T,E``: the process sends itself SIGKILL right after it has written the checkpoint
  of task T at epoch E (``RunRecorder.checkpoint``), exactly as a ``kill -9`` at that moment
  would end it: no handler, no cleanup, the run's lock left to the operating system.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys

BLOCKED = ("ray", "pytorch_grad_cam", "wandb")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--deterministic", action="store_true")
    parser.add_argument("--kill-after", metavar="T,E")
    parser.add_argument("args", nargs=argparse.REMAINDER)
    options = parser.parse_args()
    args = options.args[1:] if options.args[:1] == ["--"] else options.args
    for name in BLOCKED:
        sys.modules[name] = None  # type: ignore[assignment]  # import raises ImportError
    if options.deterministic:
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        import torch

        torch.use_deterministic_algorithms(True, warn_only=True)
    if options.kill_after:
        task, epoch = (int(part) for part in options.kill_after.split(","))
        from xder_cli.runs.recorder import RunRecorder

        checkpoint = RunRecorder.checkpoint

        def checkpoint_then_die(self, loop):  # type: ignore[no-untyped-def]
            checkpoint(self, loop)
            if (loop.task, loop.epoch) == (task, epoch):
                os.kill(os.getpid(), signal.SIGKILL)

        RunRecorder.checkpoint = checkpoint_then_die  # type: ignore[method-assign]
    from xder_cli.main import main as xder_run

    return xder_run(args)


if __name__ == "__main__":
    sys.exit(main())
