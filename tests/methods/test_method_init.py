"""What X-DER and ER build when they are made: the replay buffer's dtype and device, X-DER's
visit counters, its fixed polytope (``rpc``) and its check for a strong augmentation."""

from __future__ import annotations

import pytest
import torch
from tests.methods.test_meta_device import META

from xder_methods import (
    ContinualSetting,
    MethodConfigError,
    ReplayConfig,
    Transforms,
    XDERConfig,
    create_method,
)

SETTING = ContinualSetting((2, 2, 2), (1, 2, 2))


def make(name, tiny_net, setting=SETTING, transforms=None, device=None, **config):
    """The method ``name`` on a TinyNet held on ``device`` (its parameters': the method's)."""
    net = tiny_net(setting.num_classes)
    if device is not None:
        net = net.to(device)
    config_class = XDERConfig if name == "xder" else ReplayConfig
    return create_method(
        name,
        net=net,
        setting=setting,
        transforms=transforms if transforms is not None else Transforms(train=_id, test=_id, strong=_id),
        config=config_class(buffer_size=7, minibatch_size=2, **config),
        generator=torch.Generator().manual_seed(0),
    )


def _id(x: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
    return x.float()


@pytest.mark.parametrize("name", ["er", "xder"])
@pytest.mark.parametrize("dtype", [torch.uint8, torch.float32, torch.float16])
def test_the_buffer_stores_examples_in_the_setting_s_input_dtype(name, dtype, tiny_net) -> None:
    """Raw inputs are stored as the data set gives them: uint8 images, or float features."""
    setting = ContinualSetting((2, 2, 2), (1, 2, 2), input_dtype=dtype)
    method = make(name, tiny_net, setting)
    assert method.buffer.examples.dtype == dtype
    assert method.buffer.examples.shape == (8, 1, 2, 2)  # 7 rows and the scratch row


@pytest.mark.parametrize(
    ("name", "config"),
    [("er", {}), *[("xder", {"future_heads": heads}) for heads in ("supcon", "ce", "rpc", "none")]],
    ids=["er", "xder", "xder-ce", "xder-rpc", "xder-none"],
)
def test_every_buffer_is_made_on_the_method_s_device(name, config, tiny_net) -> None:
    """Built on a net held on the meta device, a method makes its replay buffer, X-DER's visit
    counters and its polytope on meta: one made on the default device (the CPU) instead would be
    a copy, or an error, at every step on a GPU."""
    method = make(name, tiny_net, device=META, **config)
    assert method.device == META
    held = dict(method.named_buffers())
    expected = {"buffer.examples", "buffer.labels", "buffer.task_labels", "buffer.seen"}
    if name == "xder":
        expected |= {"buffer.logits", "visits"} | ({"polytope"} if config["future_heads"] == "rpc" else set())
    assert set(held) == expected
    assert {key: value.device for key, value in held.items()} == dict.fromkeys(expected, META)


def test_xder_keeps_one_visit_counter_per_buffer_row_and_the_scratch_row(tiny_net) -> None:
    """A step counts the visits of the rows it draws and writes the duplicates' count to the
    scratch row (index buffer_size), like the buffer's own rows: buffer_size + 1 counters."""
    method = make("xder", tiny_net)
    assert method.visits.shape == (8,)
    assert method.visits.shape[0] == method.buffer.examples.shape[0]
    assert method.state_dict()["visits"].shape == (8,)


@pytest.mark.parametrize("future_heads", ["supcon", "ce", "rpc", "none"])
def test_only_rpc_has_a_polytope_and_a_checkpoint_never_holds_it(future_heads, tiny_net) -> None:
    """The polytope is a fixed function of the number of classes, rebuilt by every X-DER: it is
    not saved, so that checkpoints of every variant hold the same keys."""
    method = make("xder", tiny_net, future_heads=future_heads)
    state = method.state_dict()
    assert "polytope" not in state
    assert not any("polytope" in key for key in state)
    if future_heads == "rpc":
        assert method.polytope is not None
        assert method.polytope.shape == (6, 5)  # 6 vertices of the simplex in 5 dimensions
        assert "polytope" in dict(method.named_buffers())
    else:
        assert method.polytope is None
    other = make("xder", tiny_net, future_heads="supcon" if future_heads == "rpc" else "rpc")
    assert set(other.state_dict()) == set(state)


@pytest.mark.parametrize(
    ("future_heads", "needs_strong"), [("supcon", True), ("ce", False), ("rpc", False), ("none", False)]
)
def test_only_supcon_future_heads_need_a_strong_augmentation(future_heads, needs_strong, tiny_net) -> None:
    """SupCon future preparation draws strong views; the CE and RPC future heads and no future
    head draw none, so a benchmark without a strong augmentation runs them."""
    weak_only = Transforms(train=_id, test=_id, strong=None)
    if needs_strong:
        message = "X-DER's future preparation needs a strong augmentation for this benchmark"
        with pytest.raises(MethodConfigError, match=f"^{message}$"):
            make("xder", tiny_net, transforms=weak_only, future_heads=future_heads)
    else:
        method = make("xder", tiny_net, transforms=weak_only, future_heads=future_heads)
        assert method.transforms.strong is None
    assert make("xder", tiny_net, future_heads=future_heads).config.future_heads == future_heads
