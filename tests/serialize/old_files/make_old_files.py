"""Writes the old-format fixtures of tests/serialize/test_old_files.py with the writer of the tracejit on
PYTHONPATH. They were made with the writers of two past commits (their tracejit/ extracted with
``git archive <commit> tracejit | tar -x -C <dir>``, the same torch 2.13):

    schema 1: 88ad8af^ (the commit before guards became IR nodes)     -> schema1_module.tj, schema1_function.tj
    schema 2: ec0cd4b^ (the commit before the specializations table)  -> schema2_module.tj, schema2_function.tj

    PYTHONPATH=<dir> python make_old_files.py schema1

test_old_files.py builds the same models (``model``, ``fn`` below) to compare with what it decodes.
"""
import sys

import torch
from torch import nn

import tracejit


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.act = nn.ReLU()

    def forward(self, x):
        return self.act(self.fc(x)) + x


def model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(3, 4), Block(), nn.Dropout(0.5), nn.Linear(4, 2)).eval()


def fn(x, y):
    return torch.sigmoid(x) * y + 1


if __name__ == "__main__":
    out = sys.argv[1]
    torch.manual_seed(0)
    tracejit.save(tracejit.trace(model(), torch.randn(2, 3)), f"{out}_module.tj")
    tracejit.save(tracejit.trace(fn, (torch.randn(2, 3), torch.randn(2, 3))), f"{out}_function.tj")
