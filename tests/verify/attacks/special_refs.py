"""References for the verdict attacks of issue 26, class 1 (see test_verdict_trust2.py)."""

import glob
import os
import pickle

import torch
from torch import nn


class Sign(nn.Module):
    def forward(self, x):
        return torch.sign(x)


class NanEverywhere(nn.Module):
    """A broken reference: NaN for every element of every trial."""

    def forward(self, x):
        return x * float("nan")


class _Planter(nn.Module):
    """Returns relu(x); from its second call on, replaces trial 0's expected output
    (already written by the harness) with something that is not a plain .npy file."""

    calls = 0

    def forward(self, x):
        type(self).calls += 1
        if type(self).calls >= 2:
            for folder in glob.glob("/tmp/nkibot-exp-*"):
                path = os.path.join(folder, "trial0_out0.npy")
                if os.path.lexists(path):
                    os.remove(path)
                self.plant(path)
        return torch.relu(x)


class PlantLink(_Planter):
    def plant(self, path):
        os.symlink("/etc/hostname", path)


class PlantFifo(_Planter):
    def plant(self, path):
        os.mkfifo(path)


class PlantPickle(_Planter):
    def plant(self, path):
        with open(path, "wb") as handle:
            pickle.dump({"not": "an array"}, handle)


def get_inputs():
    return [torch.randn(256, 64)]


def get_init_inputs():
    return []
