# category: loss
"""Cross-entropy with label smoothing as classification heads write it:
F.cross_entropy(logits, labels, label_smoothing=0.1), mean over the batch."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, smoothing: float):
        super().__init__()
        self.smoothing = smoothing

    def forward(self, logits, labels):
        return F.cross_entropy(logits, labels, label_smoothing=self.smoothing)


batch_size = 64
num_classes = 100


def get_inputs():
    return [torch.randn(batch_size, num_classes), torch.randint(0, num_classes, (batch_size,))]


def get_init_inputs():
    return [0.1]
