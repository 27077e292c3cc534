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


def resnext_block(inplanes: int = 64, planes: int = 32, groups: int = 8) -> Bottleneck:
    """A ResNeXt bottleneck: the 3x3 convolution is grouped."""
    block = Bottleneck(inplanes, planes, 1, groups=groups, width_per_group=4)
    _randomize_batchnorm(block)
    return block


class DenseLayer(nn.Module):
    """DenseNet: bn-relu-conv1x1-bn-relu-conv3x3, concatenated to the input."""

    def __init__(self, channels: int, growth: int = 16, bottleneck: int = 4) -> None:
        super().__init__()
        self.bn1 = nn.BatchNorm2d(channels)
        self.conv1 = nn.Conv2d(channels, bottleneck * growth, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(bottleneck * growth)
        self.conv2 = nn.Conv2d(bottleneck * growth, growth, 3, padding=1, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.conv1(torch.relu(self.bn1(x)))
        y = self.conv2(torch.relu(self.bn2(y)))
        return torch.cat([x, y], 1)


class DenseBlock(nn.Module):
    def __init__(self, channels: int = 32, layers: int = 3, growth: int = 16) -> None:
        super().__init__()
        self.layers = nn.Sequential(*(DenseLayer(channels + i * growth, growth)
                                      for i in range(layers)))
        _randomize_batchnorm(self)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layers(x)


def _conv_bn(cin: int, cout: int, kernel: int, stride: int = 1, groups: int = 1,
             act: nn.Module | None = None) -> nn.Sequential:
    layers: list[nn.Module] = [nn.Conv2d(cin, cout, kernel, stride, kernel // 2, groups=groups,
                                         bias=False), nn.BatchNorm2d(cout)]
    if act is not None:
        layers.append(act)
    return nn.Sequential(*layers)


class InvertedResidual(nn.Module):
    """MobileNetV2: expand 1x1 + relu6, depthwise 3x3 + relu6, project 1x1, residual."""

    def __init__(self, channels: int = 24, expand: int = 6, stride: int = 1) -> None:
        super().__init__()
        hidden = channels * expand
        self.residual = stride == 1
        self.body = nn.Sequential(
            _conv_bn(channels, hidden, 1, act=nn.ReLU6(inplace=True)),
            _conv_bn(hidden, hidden, 3, stride, groups=hidden, act=nn.ReLU6(inplace=True)),
            _conv_bn(hidden, channels, 1))
        _randomize_batchnorm(self)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.body(x)
        return x + y if self.residual else y


class SqueezeExcite(nn.Module):
    def __init__(self, channels: int, squeezed: int, act: nn.Module, gate: nn.Module) -> None:
        super().__init__()
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.reduce = nn.Conv2d(channels, squeezed, 1)
        self.expand = nn.Conv2d(squeezed, channels, 1)
        self.act, self.gate = act, gate

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.gate(self.expand(self.act(self.reduce(self.pool(x)))))


class InvertedResidualSE(nn.Module):
    """Expand 1x1 + act, depthwise kxk + act, squeeze-excite, project 1x1, residual:
    the block of MobileNetV3 and of EfficientNet, which differ in kernel and activations."""

    def __init__(self, channels: int, expand: int, kernel: int, squeezed: int,
                 act: type[nn.Module], se_act: type[nn.Module], se_gate: type[nn.Module]) -> None:
        super().__init__()
        hidden = channels * expand
        self.expand = _conv_bn(channels, hidden, 1, act=act())
        self.depthwise = _conv_bn(hidden, hidden, kernel, groups=hidden, act=act())
        self.se = SqueezeExcite(hidden, squeezed, se_act(), se_gate())
        self.project = _conv_bn(hidden, channels, 1)
        _randomize_batchnorm(self)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.project(self.se(self.depthwise(self.expand(x))))


def mobilenet_v3_block(channels: int = 40, expand: int = 3) -> InvertedResidualSE:
    """MobileNetV3: hardswish, a 5x5 depthwise, SE with relu and hardsigmoid."""
    return InvertedResidualSE(channels, expand, 5, channels * expand // 4, nn.Hardswish,
                              nn.ReLU, nn.Hardsigmoid)


def mbconv(channels: int = 32, expand: int = 4) -> InvertedResidualSE:
    """EfficientNet: silu, a 3x3 depthwise, SE with silu and sigmoid."""
    return InvertedResidualSE(channels, expand, 3, channels // 4, nn.SiLU, nn.SiLU, nn.Sigmoid)
