"""ImageNet-layout ResNet18: torchvision's layout and names, loading a local state_dict, its errors."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torchvision
from torch import nn

from xder_models import BackboneWeightsError, ResNet18, create_backbone


def _randomised_torchvision_resnet18() -> nn.Module:
    """torchvision's resnet18 with 1000 classes and every tensor (running statistics too) random."""
    generator = torch.Generator().manual_seed(0)
    reference = torchvision.models.resnet18(weights=None, num_classes=1000)
    with torch.no_grad():
        for name, tensor in reference.state_dict().items():
            if name.endswith("num_batches_tracked"):
                tensor.fill_(7)
            elif name.endswith("running_var"):
                tensor.uniform_(0.5, 2.0, generator=generator)
            else:
                tensor.normal_(0.0, 0.1, generator=generator)
    return reference


@pytest.fixture(scope="module")
def reference_file(tmp_path_factory: pytest.TempPathFactory) -> tuple[nn.Module, Path]:
    reference = _randomised_torchvision_resnet18()
    path = tmp_path_factory.mktemp("weights") / "resnet18-f37072fd.pth"
    torch.save(reference.state_dict(), path)
    return reference, path


def test_imagenet_layout_and_names() -> None:
    net = create_backbone("resnet18", 200)
    assert net.conv1.kernel_size == (7, 7)
    assert net.conv1.stride == (2, 2)
    assert isinstance(net.maxpool, nn.MaxPool2d)
    reference = torchvision.models.resnet18(weights=None, num_classes=200)
    assert net.state_dict().keys() == reference.state_dict().keys()
    assert net.gradcam_layer is net.layer4[1]
    maps: list[tuple[int, ...]] = []
    hook = net.gradcam_layer.register_forward_hook(lambda _m, _i, out: maps.append(tuple(out.shape)))
    with torch.no_grad():
        net.eval()(torch.zeros(1, 3, 224, 224))
        net(torch.zeros(1, 3, 32, 32))
    hook.remove()
    assert maps == [(1, 512, 7, 7), (1, 512, 1, 1)]  # docs/data-formats.md, "ResNet18"


def test_loads_torchvision_weights_and_replaces_the_head(reference_file: tuple[nn.Module, Path]) -> None:
    reference, path = reference_file
    net = create_backbone("resnet18", 200, weights=str(path))
    torch.testing.assert_close(net.layer3[0].conv2.weight, reference.layer3[0].conv2.weight)
    torch.testing.assert_close(net.conv1.weight, reference.conv1.weight)
    torch.testing.assert_close(net.layer4[1].bn2.running_var, reference.layer4[1].bn2.running_var)
    assert int(net.bn1.num_batches_tracked) == 7
    assert net.fc.out_features == 200
    assert net.fc.in_features == 512
    # The head is fresh: not the checkpoint's 1000-class layer cut down.
    assert not torch.equal(net.fc.weight, reference.fc.weight[:200])
    reference.eval()
    net.eval()
    x = torch.randn(2, 3, 64, 64)
    with torch.no_grad():
        features = net.forward_features(x)
        # torchvision's children in order: conv1, bn1, relu, maxpool, layer1-4, avgpool, then fc.
        expected = nn.Sequential(*list(reference.children())[:-1])(x).flatten(1)
    torch.testing.assert_close(features, expected)


def test_checkpoint_without_head_or_batch_counters_loads(tmp_path: Path) -> None:
    state = _randomised_torchvision_resnet18().state_dict()
    headless = {k: v for k, v in state.items() if not k.startswith("fc.") and "num_batches_tracked" not in k}
    path = tmp_path / "headless.pth"
    torch.save(headless, path)
    net = ResNet18(10, weights=str(path))
    torch.testing.assert_close(net.layer1[0].conv1.weight, state["layer1.0.conv1.weight"])


def test_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "nowhere.pth"
    with pytest.raises(BackboneWeightsError, match=r"nowhere\.pth: no such weights file"):
        create_backbone("resnet18", 200, weights=str(path))
    assert issubclass(BackboneWeightsError, ValueError)


def test_unreadable_file_and_not_a_state_dict(tmp_path: Path) -> None:
    garbage = tmp_path / "garbage.pth"
    garbage.write_bytes(b"this is not a checkpoint")
    with pytest.raises(BackboneWeightsError, match=r"garbage\.pth: not a readable torch file"):
        create_backbone("resnet18", 200, weights=str(garbage))
    listing = tmp_path / "list.pth"
    torch.save([torch.zeros(1)], listing)
    with pytest.raises(BackboneWeightsError, match=r"list\.pth: not a state_dict"):
        create_backbone("resnet18", 200, weights=str(listing))


def test_wrong_keys(tmp_path: Path) -> None:
    # The CIFAR ResNet18 names its shortcuts "shortcut", not "downsample", and has no max-pool stem.
    path = tmp_path / "cifar.pth"
    torch.save(create_backbone("resnet18-cifar", 100, width=8).state_dict(), path)
    with pytest.raises(
        BackboneWeightsError, match=r"cifar\.pth: missing key 'layer2\.0\.downsample\.0\.weight'"
    ):
        create_backbone("resnet18", 200, weights=str(path))
    extra = tmp_path / "extra.pth"
    state = torchvision.models.resnet18(weights=None).state_dict()
    torch.save({**state, "projector.weight": torch.zeros(2, 2)}, extra)
    with pytest.raises(BackboneWeightsError, match=r"unexpected key 'projector\.weight'"):
        create_backbone("resnet18", 200, weights=str(extra))


def test_wrong_shape(tmp_path: Path) -> None:
    state = torchvision.models.resnet18(weights=None).state_dict()
    state["conv1.weight"] = torch.zeros(64, 3, 3, 3)  # a CIFAR stem
    path = tmp_path / "stem.pth"
    torch.save(state, path)
    with pytest.raises(
        BackboneWeightsError, match=r"'conv1\.weight' has shape \(64, 3, 3, 3\).*\(64, 3, 7, 7\)"
    ):
        create_backbone("resnet18", 200, weights=str(path))


def test_a_weights_file_that_would_run_code_is_refused(tmp_path: Path, planted) -> None:
    (payload, marker), path = planted, tmp_path / "planted.pth"
    torch.save({"conv1.weight": torch.zeros(1), "hook": payload}, path)
    with pytest.raises(BackboneWeightsError, match=r"planted\.pth: not a readable torch file"):
        create_backbone("resnet18", 200, weights=str(path))
    assert not marker.exists()
    torch.load(path, weights_only=False)  # what a plain torch.load would have done
    assert marker.exists()
