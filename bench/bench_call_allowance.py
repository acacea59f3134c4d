"""The share of its call allowance a real program uses (support/call_budget.Allowance, round 27): each model traced
at batch 1 (GPT-2 also at 2, Mask R-CNN also at 2), saved, loaded and called at batch 1 and 8 (GPT-2 and BERT also at longer lengths than traced, Mask
R-CNN at other images); prints the work its call counted, the allowance (ALLOWANCE_FACTOR x the traced call's work,
times the square of the inputs' growth over the traced shapes, within the file's cap), and their ratio. A real
program must stay well under 1; the cap (round 25/26's total) is printed for comparison.

Usage::

    python bench/bench_call_allowance.py [resnet50 bert gpt2 maskrcnn ...]
"""
from __future__ import annotations

import io
import os
import sys
import time
import warnings

import torch

import tracejit
from tracejit.support import call_budget

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_call_work import _AsTuple, _torchvision  # noqa: E402


def resnet50():
    m = _torchvision().models.resnet50().eval()
    x = lambda b: (torch.randn(b, 3, 224, 224),)   # noqa: E731
    return m, [(x(1), [("b1", x(1)), ("b8", x(8))])]


def bert():
    from bench_core import BertWrapper
    import transformers
    transformers.logging.set_verbosity_error()
    cfg = transformers.BertConfig()
    cfg.return_dict = False
    m = BertWrapper(transformers.BertModel(cfg).eval()).eval()
    x = lambda b, n: (torch.randint(0, cfg.vocab_size, (b, n)), torch.ones(b, n, dtype=torch.long))   # noqa: E731
    return m, [(x(1, 64), [("b1 L64", x(1, 64)), ("b8 L64", x(8, 64)), ("b1 L256", x(1, 256)),
                           ("b8 L256", x(8, 256))])]


class _GPT2(torch.nn.Module):
    def __init__(self, m):
        super().__init__()
        self.m = m

    def forward(self, ids):
        return self.m(ids, use_cache=False, return_dict=False)[0]


def gpt2():
    import transformers
    transformers.logging.set_verbosity_error()
    m = _GPT2(transformers.GPT2Model(transformers.GPT2Config()).eval()).eval()
    x = lambda b, n: (torch.randint(0, 50257, (b, n)),)   # noqa: E731
    # traced at batch 1 and at batch 2: transformers' mask code guards batch 1 (masking_utils.py)
    return m, [(x(1, 32), [("b1 L32", x(1, 32)), ("b1 L256", x(1, 256)), ("b1 L1024", x(1, 1024))]),
               (x(2, 32), [("b2 L32", x(2, 32)), ("b8 L32", x(8, 32)), ("b8 L256", x(8, 256))])]


def maskrcnn():
    torch.manual_seed(0)
    m = _torchvision().models.detection.maskrcnn_resnet50_fpn(
        weights=None, weights_backbone=None, num_classes=5, min_size=320, max_size=320, box_score_thresh=0.0,
        rpn_pre_nms_top_n_test=200, rpn_post_nms_top_n_test=200).eval()
    # its program serves the traced images only (a guard on int(box) in the mask pasting): called with them
    one, two = (torch.rand(1, 3, 320, 320),), (torch.rand(2, 3, 320, 320),)
    return _AsTuple(m).eval(), [(one, [("b1 320", one)]), (two, [("b2 320", two)])]


MODELS = {"resnet50": resnet50, "bert": bert, "gpt2": gpt2, "maskrcnn": maskrcnn}


def measure(name: str) -> None:
    model, traces = MODELS[name]()
    for example, calls in traces:
        _measure(name, model, example, calls)


def _measure(name: str, model, example, calls) -> None:
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        traced = tracejit.trace(model, example, check_trace=False)
        buf = io.BytesIO()
        tracejit.save(traced, buf)
        loaded = tracejit.load(io.BytesIO(buf.getvalue()))
        for label, args in calls:
            for k in ("limit", "work", "elements"):
                call_budget._CALL.__dict__.pop(k, None)
            t = time.perf_counter()
            try:
                loaded(*args)
            except Exception as e:   # a guard of the trace (another length it did not generalize): say so
                print(f"{name:9s} {label:11s} {type(e).__name__}: {str(e)[:160]}", flush=True)
                continue
            took = time.perf_counter() - t
            c = call_budget._CALL
            limit = call_budget.call_limit()
            if limit is None:   # no check ran: a program whose ops cannot pass its total counts nothing
                print(f"{name:9s} {label:11s} call {took:6.2f} s  no work counted (no check ran)", flush=True)
                continue
            cap = call_budget.TOTAL_WORK_FACTOR * call_budget.WORK_FACTOR * max(
                tracejit.serialize.limits.max_elements(len(buf.getvalue())), call_budget.CALL_FACTOR * c.elements)
            print(f"{name:9s} {label:11s} call {took:6.2f} s  counted {c.work:.3e}  allowance {limit:.3e} "
                  f"(share {c.work / limit:.3f})  cap {cap:.3e} (share {c.work / cap:.2e})", flush=True)


if __name__ == "__main__":
    os.environ.setdefault("TRACEJIT_CACHE_DIR", "")
    for n in sys.argv[1:] or list(MODELS):
        measure(n)
