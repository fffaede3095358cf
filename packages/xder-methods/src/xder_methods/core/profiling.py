"""Counting what a training step dispatches: kernels, and the ops that wait for the device.

Hardware-independent (it intercepts dispatched ATen ops with a ``TorchDispatchMode``), so the
counts are exact on a CPU too: a test can assert that a step has no host synchronisation even
where no GPU exists (docs/development.md, "How it is fast").
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

__all__ = ["OpCounter", "is_host_sync", "is_view"]

_aten = torch.ops.aten
# Op packets whose result (or output size) the host must read from the device before going on.
_SYNCING = {
    _aten._local_scalar_dense,  # .item(), float(t), bool(t), Python control flow on a tensor
    _aten.nonzero,
    _aten.nonzero_static,
    _aten.masked_select,
    _aten._unique,
    _aten._unique2,
    _aten.unique_dim,
    _aten.unique_consecutive,
    _aten.is_nonzero,
    _aten.equal,
    _aten.allclose,
    # torch.tensor(host data) inside a step: on a GPU a blocking copy from pageable host memory.
    _aten.lift_fresh,
}


def is_host_sync(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    """Whether a dispatched op makes the host wait on the device: a scalar read, an output whose
    size depends on the data (``nonzero``, boolean-mask indexing, ``unique``, ``repeat_interleave``
    without ``output_size``), a copy from a device to the host, or one from the host to a device
    without ``non_blocking`` (``torch.tensor(values)`` counts as one wherever it runs: on a GPU it
    is a blocking copy from pageable memory, which ``torch.cuda.set_sync_debug_mode`` reports)."""
    packet = func.overloadpacket
    if packet in _SYNCING:
        return True
    if packet is _aten.index:
        indices = args[1] if len(args) > 1 else kwargs.get("indices", ())
        return any(i is not None and i.dtype == torch.bool for i in indices)
    if packet is _aten.repeat_interleave:
        # repeat_interleave.Tensor(repeats) or repeat_interleave.self_Tensor(self, repeats)
        repeats = args[1] if len(args) > 1 else (args[0] if args else kwargs.get("repeats"))
        return isinstance(repeats, torch.Tensor) and kwargs.get("output_size") is None
    if packet in (_aten._to_copy, _aten.copy_):
        source = args[1] if packet is _aten.copy_ else args[0]
        target_device = kwargs.get("device") if packet is _aten._to_copy else args[0].device
        if not isinstance(source, torch.Tensor) or target_device is None:
            return False
        source_type, target_type = source.device.type, torch.device(target_device).type
        if source_type != "cpu" and target_type == "cpu":
            return True
        positional = args[2] if packet is _aten.copy_ and len(args) > 2 else False
        non_blocking = kwargs.get("non_blocking", positional)
        return source_type == "cpu" and target_type not in ("cpu", "meta") and not non_blocking
    return False


def is_view(func: Any) -> bool:
    """Whether a dispatched op only makes a view of its input (``view``, ``permute``,
    ``unsqueeze``, ``select``, ``expand``...): its result aliases an input without being written,
    so it changes metadata and launches no kernel."""
    return any(r.alias_info is not None and not r.alias_info.is_write for r in func._schema.returns)


class OpCounter(TorchDispatchMode):
    """Context manager counting every dispatched ATen op, the views among them and the
    host-synchronising ones.

    Attributes:
        ops: Counter of op names.
        views: Counter of the names of view ops (:func:`is_view`): no kernel launch.
        syncs: Counter of the names of host-synchronising ops.

    Example::

        with OpCounter() as counter:
            step()
        assert counter.host_syncs == 0
    """

    def __init__(self) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.ops: Counter[str] = Counter()
        self.views: Counter[str] = Counter()
        self.syncs: Counter[str] = Counter()

    @property
    def total(self) -> int:
        return sum(self.ops.values())

    @property
    def launches(self) -> int:
        """The ops that are not views: on a GPU, about one kernel launch each (an upper bound
        for ops that some backends fuse or skip, e.g. a copy onto itself)."""
        return self.total - sum(self.views.values())

    @property
    def host_syncs(self) -> int:
        return sum(self.syncs.values())

    def __torch_dispatch__(
        self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: dict[str, Any] | None = None
    ) -> Any:
        kwargs = kwargs or {}
        name = str(func.overloadpacket.__name__)
        self.ops[name] += 1
        if is_view(func):
            self.views[name] += 1
        if is_host_sync(func, args, kwargs):
            self.syncs[name] += 1
        return func(*args, **kwargs)
