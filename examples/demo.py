"""Trace a small conv net with tracejit, show what was recorded, check it, and save it to demo_model.tjit."""
import os

import torch
import torch.nn as nn

import tracejit


class Net(nn.Module):  # the example from torch.jit.trace_module's docs
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 1, 3)

    def forward(self, x):
        return self.conv(x)

    def weighted_kernel_sum(self, weight):
        return weight * self.conv.weight


class SmallConvNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.relu = nn.ReLU()
        self.conv2 = nn.Conv2d(8, 16, 3, stride=2, padding=1)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(16, 10)

    def forward(self, x):
        x = self.relu(self.bn(self.conv1(x)))
        x = self.pool(self.conv2(x))
        x = x.view(x.size(0), -1)
        return self.fc(x)


def header(title):
    print(f"\n=== {title} " + "=" * max(0, 60 - len(title)))


def main():
    torch.manual_seed(0)
    model = SmallConvNet().eval()
    traced = tracejit.trace(model, torch.randn(2, 3, 32, 32))

    header("graph")
    print(traced.graph)
    header("code")
    print(traced.code)
    header("module")
    print(traced)

    header("new batch and image size")
    x = torch.randn(5, 3, 40, 40)
    expected, got = model(x), traced(x)
    torch.testing.assert_close(got, expected)
    diff = (got - expected).abs().max().item()
    print(f"traced output equals eager on batch 5 (max abs diff {diff:.3g})")

    header("trace_module on Net")
    inputs = {"forward": torch.rand(1, 1, 3, 3), "weighted_kernel_sum": torch.rand(1, 1, 3, 3)}
    tm = tracejit.trace_module(Net(), inputs)
    print(tm.weighted_kernel_sum.code)

    header("save")
    path = "demo_model.tjit"
    tracejit.save(traced, path)
    torch.testing.assert_close(tracejit.load(path)(x), expected)
    print(f"saved the traced SmallConvNet to {path} ({os.path.getsize(path)} bytes); it loads back and "
          f"equals eager. Describe it with: tracejit inspect {path}")

    print("\ndemo OK")


if __name__ == "__main__":
    main()
