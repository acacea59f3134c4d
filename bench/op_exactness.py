"""Each op of a ViT block alone on eager, OpenVINO and onnxruntime: its max distance to the op's float64 answer
(issue #25 item 3: is an exported backend's larger error on a whole model an approximate kernel, or where fp32
reassociation landed?). One thread; prints one line per op.

    PYTHONPATH=$PWD python bench/op_exactness.py
"""
from __future__ import annotations

import importlib.util
import warnings

import torch

import tracejit


class Attention(torch.nn.Module):
    """scaled_dot_product_attention over 3 heads of the input."""

    def forward(self, x):
        q = x.view(x.shape[0], x.shape[1], 3, -1).transpose(1, 2)
        return torch.nn.functional.scaled_dot_product_attention(q, q, q)


def ops() -> dict:
    return {"GELU (erf)": torch.nn.GELU(), "LayerNorm(192)": torch.nn.LayerNorm(192), "softmax": torch.nn.Softmax(-1),
            "Linear(192, 192)": torch.nn.Linear(192, 192), "attention (3 heads)": Attention()}


def main() -> None:
    warnings.simplefilter("ignore")
    torch.set_num_threads(1)
    torch.manual_seed(0)
    x = torch.randn(1, 50, 192) * 2
    modules = ops()
    backends = [b for b in ("openvino", "onnxruntime") if importlib.util.find_spec(b) is not None]
    print(f"{'op':24s} {'eager':>9s} " + " ".join(f"{b:>11s}" for b in backends))
    for name, module in modules.items():
        module = module.eval()
        with torch.no_grad():
            want = module.double()(x.double())
            module.float()
            traced = tracejit.trace(module, (x,), check_trace=False)
            got = [module(x)] + [tracejit.optimize_for_inference(traced, backend=b)(x) for b in backends]
        cells = [f"{(g.double() - want).abs().max().item():.1e}" for g in got]
        print(f"{name:24s} {cells[0]:>9s} " + " ".join(f"{c:>11s}" for c in cells[1:]))


if __name__ == "__main__":
    main()
