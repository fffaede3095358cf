"""Loading pretrained weights from a local state_dict file, with one-line errors a user can act on."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import torch
from torch import Tensor, nn

__all__ = ["BackboneWeightsError", "load_weights"]

# Buffers that BatchNorm fills in itself when a checkpoint lacks them (checkpoints saved before
# torch 0.4.1 have no ``num_batches_tracked``).
_OPTIONAL_SUFFIXES = (".num_batches_tracked",)


class BackboneWeightsError(ValueError):
    """A weights file is missing, unreadable, or does not fit the backbone."""


def _read_state_dict(path: Path) -> dict[str, Tensor]:
    if not path.is_file():
        raise BackboneWeightsError(f"{path}: no such weights file; pass the path of a saved state_dict")
    try:
        # weights_only: a state dict needs no arbitrary unpickling, and a foreign file must not run code.
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as error:  # a foreign or truncated file fails deep in the unpickler, with any type
        raise BackboneWeightsError(
            f"{path}: not a readable torch file ({type(error).__name__}); "
            "save one with torch.save(model.state_dict(), path)"
        ) from error
    if not isinstance(state, Mapping) or not all(
        isinstance(k, str) and isinstance(v, Tensor) for k, v in state.items()
    ):
        raise BackboneWeightsError(
            f"{path}: not a state_dict (a mapping of names to tensors); "
            "save one with torch.save(model.state_dict(), path)"
        )
    return dict(state)


def load_weights(module: nn.Module, path: str | Path, *, skip: tuple[str, ...] = ()) -> None:
    """Copy the tensors of a state_dict file into ``module``, checking names and shapes first.

    Args:
        module: the network to fill; its own parameter and buffer names are the contract.
        path: a file written by ``torch.save(state_dict)``.
        skip: name prefixes to ignore on both sides (e.g. ``("fc.",)`` for a head that is replaced).

    Raises:
        BackboneWeightsError: the file is missing or unreadable, a name is missing or unexpected, or a
            shape differs; the message names the file and the first offending key.
    """
    path = Path(path)
    state = {k: v for k, v in _read_state_dict(path).items() if not k.startswith(skip)}
    own = {k: v for k, v in module.state_dict().items() if not k.startswith(skip)}
    missing = sorted(k for k in own.keys() - state.keys() if not k.endswith(_OPTIONAL_SUFFIXES))
    unexpected = sorted(state.keys() - own.keys())
    for keys, what in ((missing, "missing key"), (unexpected, "unexpected key")):
        if keys:
            more = f" (and {len(keys) - 1} more)" if len(keys) > 1 else ""
            raise BackboneWeightsError(
                f"{path}: {what} {keys[0]!r}{more}; pass a state_dict saved from this backbone's layout"
            )
    for key, value in state.items():
        if value.shape != own[key].shape:
            raise BackboneWeightsError(
                f"{path}: {key!r} has shape {tuple(value.shape)}, the backbone needs {tuple(own[key].shape)}"
            )
    # strict=False only for the skipped prefixes and optional buffers: every other key was checked above.
    module.load_state_dict(state, strict=False)
