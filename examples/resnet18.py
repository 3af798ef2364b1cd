"""ResNet-18 with random weights, for ``aitune-fp tune --model examples/resnet18.py:factory``.

torchvision's own ``resnet18()`` when torchvision imports; otherwise the same architecture
written out here from ``torch.nn`` (He et al. 2015, as torchvision builds it: BasicBlock,
layers [2, 2, 2, 2], 1,000 classes, 11.7 M parameters, the same initialisation). Nothing is
downloaded: the weights are random, drawn from a fixed seed.

PyPI's torchvision wheels for Linux are built against CUDA torch: next to a CPU-only torch
(``torch==2.13.0+cpu``) ``import torchvision`` fails (``operator torchvision::nms does not
exist``), so this file does not depend on it.
"""

from __future__ import annotations

import torch
from torch import nn

#: Images per sample (the batch the tune times), at ImageNet's 224 x 224.
BATCH = 2


class BasicBlock(nn.Module):
    """Two 3x3 convolutions with batch norm and a residual connection (torchvision's)."""

    expansion = 1

    def __init__(self, inplanes: int, planes: int, stride: int = 1) -> None:
        """A block from ``inplanes`` to ``planes`` channels; ``stride`` 2 halves the size."""
        super().__init__()
        self.conv1 = nn.Conv2d(inplanes, planes, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(planes, planes, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.downsample: nn.Module | None = None
        if stride != 1 or inplanes != planes:
            self.downsample = nn.Sequential(
                nn.Conv2d(inplanes, planes, 1, stride=stride, bias=False), nn.BatchNorm2d(planes)
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """conv-bn-relu-conv-bn, plus the (downsampled) input, then relu."""
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu(out + identity)


class ResNet18(nn.Module):
    """ResNet-18 as torchvision defines it (``torchvision.models.resnet18()``)."""

    def __init__(self, num_classes: int = 1000) -> None:
        """Stem, four stages of two BasicBlocks (64, 128, 256, 512 channels), pool, fc."""
        super().__init__()
        self.conv1 = nn.Conv2d(3, 64, 7, stride=2, padding=3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, stride=2, padding=1)
        self.layer1 = nn.Sequential(BasicBlock(64, 64), BasicBlock(64, 64))
        self.layer2 = nn.Sequential(BasicBlock(64, 128, 2), BasicBlock(128, 128))
        self.layer3 = nn.Sequential(BasicBlock(128, 256, 2), BasicBlock(256, 256))
        self.layer4 = nn.Sequential(BasicBlock(256, 512, 2), BasicBlock(512, 512))
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(512, num_classes)
        for m in self.modules():  # torchvision's initialisation
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.constant_(m.weight, 1)
                nn.init.constant_(m.bias, 0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Logits ``(batch, num_classes)`` of images ``(batch, 3, H, W)``."""
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))


def _torchvision_resnet18() -> nn.Module | None:
    """The ResNet-18 of torchvision (random weights), or None when torchvision does not import."""
    try:
        from torchvision.models import resnet18
    except Exception:  # missing, or a CUDA build next to a CPU torch (see the module docstring)
        return None
    model: nn.Module = resnet18(weights=None)
    return model


def factory() -> tuple[nn.Module, torch.Tensor]:
    """ResNet-18 in eval mode with random weights, and a batch of ``BATCH`` random images."""
    with torch.random.fork_rng(devices=[]):  # the caller's random state is left alone
        torch.manual_seed(0)
        model = _torchvision_resnet18() or ResNet18()
    images = torch.randn(BATCH, 3, 224, 224, generator=torch.Generator().manual_seed(1))
    return model.eval(), images
