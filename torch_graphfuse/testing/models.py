"""Reference models in plain torch.nn (no torchvision on this CPU build),
with random weights, for the demo, the tests and the benchmarks."""

from __future__ import annotations

import torch
from torch import nn


class BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, inplanes: int, planes: int, stride: int = 1, groups: int = 1,
                 width_per_group: int = 64) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(inplanes, planes, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = _downsample(inplanes, planes * self.expansion, stride)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu(out + identity)


class Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, inplanes: int, planes: int, stride: int = 1, groups: int = 1,
                 width_per_group: int = 64) -> None:
        super().__init__()
        width = int(planes * (width_per_group / 64.0)) * groups
        self.conv1 = nn.Conv2d(inplanes, width, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, 3, stride, 1, groups=groups, bias=False)
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3 = nn.Conv2d(width, planes * self.expansion, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(planes * self.expansion)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = _downsample(inplanes, planes * self.expansion, stride)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return self.relu(out + identity)


def _downsample(inplanes: int, outplanes: int, stride: int) -> nn.Module | None:
    if stride == 1 and inplanes == outplanes:
        return None
    return nn.Sequential(nn.Conv2d(inplanes, outplanes, 1, stride, bias=False),
                         nn.BatchNorm2d(outplanes))


class ResNet(nn.Module):
    """ResNet / ResNeXt as in torchvision: `ResNet(Bottleneck, [3, 4, 6, 3])` is ResNet-50."""

    def __init__(self, block: type[BasicBlock] | type[Bottleneck], layers: list[int],
                 num_classes: int = 1000, groups: int = 1, width_per_group: int = 64,
                 base_width: int = 64) -> None:
        super().__init__()
        self.inplanes = base_width
        self.stem = nn.Sequential(
            nn.Conv2d(3, base_width, 7, 2, 3, bias=False), nn.BatchNorm2d(base_width),
            nn.ReLU(inplace=True), nn.MaxPool2d(3, 2, 1))
        stages = []
        for i, blocks in enumerate(layers):
            planes = base_width * 2 ** i
            stride = 1 if i == 0 else 2
            stage = []
            for j in range(blocks):
                stage.append(block(self.inplanes, planes, stride if j == 0 else 1, groups,
                                   width_per_group))
                self.inplanes = planes * block.expansion
            stages.append(nn.Sequential(*stage))
        self.stages = nn.Sequential(*stages)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(self.inplanes, num_classes)
        _randomize_batchnorm(self)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stages(self.stem(x))
        return self.fc(torch.flatten(self.pool(x), 1))


def resnet50(num_classes: int = 1000) -> ResNet:
    return ResNet(Bottleneck, [3, 4, 6, 3], num_classes)


def resnet18(num_classes: int = 1000) -> ResNet:
    return ResNet(BasicBlock, [2, 2, 2, 2], num_classes)


def _randomize_batchnorm(model: nn.Module) -> None:
    """Non-trivial running statistics, so that folded batch norms are checked."""
    gen = torch.Generator().manual_seed(0)
    for m in model.modules():
        if isinstance(m, (nn.BatchNorm1d, nn.BatchNorm2d)):
            with torch.no_grad():
                m.running_mean.uniform_(-0.1, 0.1, generator=gen)
                m.running_var.uniform_(0.5, 1.5, generator=gen)
                m.weight.uniform_(0.5, 1.5, generator=gen)
                m.bias.uniform_(-0.1, 0.1, generator=gen)
