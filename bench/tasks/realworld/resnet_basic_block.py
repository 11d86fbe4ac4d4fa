# category: conv
"""torchvision's ResNet BasicBlock (no downsample): conv3x3-BN-ReLU, conv3x3-BN, identity
added, ReLU."""

import torch
import torch.nn as nn


def conv3x3(in_planes, out_planes, stride=1):
    return nn.Conv2d(in_planes, out_planes, kernel_size=3, stride=stride, padding=1, bias=False)


class Model(nn.Module):
    expansion = 1

    def __init__(self, inplanes: int, planes: int):
        super().__init__()
        self.conv1 = conv3x3(inplanes, planes)
        self.bn1 = nn.BatchNorm2d(planes)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = conv3x3(planes, planes)
        self.bn2 = nn.BatchNorm2d(planes)

    def forward(self, x):
        identity = x
        out = self.conv1(x)
        out = self.bn1(out)
        out = self.relu(out)
        out = self.conv2(out)
        out = self.bn2(out)
        out += identity
        out = self.relu(out)
        return out


batch_size = 2
planes = 16
height = 16
width = 16


def get_inputs():
    return [torch.randn(batch_size, planes, height, width)]


def get_init_inputs():
    return [planes, planes]
