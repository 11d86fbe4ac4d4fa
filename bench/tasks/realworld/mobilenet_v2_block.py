# category: conv
"""torchvision's MobileNetV2 InvertedResidual (stride 1, expand 4): 1x1 conv-BN-ReLU6,
3x3 depthwise conv-BN-ReLU6, 1x1 conv-BN, residual add."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, inp: int, oup: int, expand_ratio: int):
        super().__init__()
        hidden_dim = int(round(inp * expand_ratio))
        self.use_res_connect = inp == oup
        self.conv = nn.Sequential(
            nn.Conv2d(inp, hidden_dim, 1, 1, 0, bias=False),
            nn.BatchNorm2d(hidden_dim),
            nn.ReLU6(inplace=True),
            nn.Conv2d(hidden_dim, hidden_dim, 3, 1, 1, groups=hidden_dim, bias=False),
            nn.BatchNorm2d(hidden_dim),
            nn.ReLU6(inplace=True),
            nn.Conv2d(hidden_dim, oup, 1, 1, 0, bias=False),
            nn.BatchNorm2d(oup),
        )

    def forward(self, x):
        if self.use_res_connect:
            return x + self.conv(x)
        return self.conv(x)


batch_size = 2
channels = 16
height = 14
width = 14


def get_inputs():
    return [torch.randn(batch_size, channels, height, width)]


def get_init_inputs():
    return [channels, channels, 4]
