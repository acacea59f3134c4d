"""The work a real program's call counts (support/call_budget.py) against what one call of a program loaded from a
file may do: each zoo model traced, saved, loaded and called once at batch 8; prints the counted work (the
contractions' multiply-adds, plus, where the program counts every op, each op's elements times its step weight),
the call's limit, and their ratio. Round 26's rule: a real program's call must stay well under it (ratio << 1).

Usage::

    python bench/bench_call_work.py [resnet50 bert maskrcnn ...]
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
from tracejit.serialize import limits


def _torchvision():
    """torchvision, from the test suite's folder where it is not installed (tests/models/torchvision_ops.py)."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "models"))
    from torchvision_ops import import_torchvision
    found = import_torchvision()
    if found is None:
        raise SystemExit("torchvision is not installed")
    return found


def resnet50():
    torchvision = _torchvision()
    return torchvision.models.resnet50().eval(), (torch.randn(8, 3, 224, 224),)


def bert():
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from bench_core import BertWrapper
    import transformers
    transformers.logging.set_verbosity_error()
    config = transformers.BertConfig()
    config.return_dict = False
    model = BertWrapper(transformers.BertModel(config).eval()).eval()
    return model, (torch.randint(0, config.vocab_size, (8, 128)), torch.ones(8, 128, dtype=torch.long))


class _AsTuple(torch.nn.Module):
    def __init__(self, m):
        super().__init__()
        self.m = m

    def forward(self, images):
        out = self.m(list(images))
        return tuple(t for d in out for t in (d["boxes"], d["scores"], d["labels"], d["masks"]))


def maskrcnn():
    """torchvision's Mask R-CNN (ResNet-50 FPN, random weights, 5 classes) on 8 images of 320 x 320 (min_size 320:
    CPU), 200 proposals per level: few enough boxes that batched_nms takes its offset path (more than 1,000 boxes
    on CPU take a path through torch.unique, whose _unique2 files may not name)."""
    torchvision = _torchvision()
    torch.manual_seed(0)
    m = torchvision.models.detection.maskrcnn_resnet50_fpn(
        weights=None, weights_backbone=None, num_classes=5, min_size=320, max_size=320, box_score_thresh=0.0,
        rpn_pre_nms_top_n_test=200, rpn_post_nms_top_n_test=200).eval()
    return _AsTuple(m).eval(), (torch.rand(8, 3, 320, 320),)


MODELS = {"resnet50": resnet50, "bert": bert, "maskrcnn": maskrcnn}


def measure(name: str) -> None:
    model, example = MODELS[name]()
    # Mask R-CNN's program at batch 8 (each image's post-processing unrolled) has a 18 MB header of 1.1 million
    # values, more than a file's 16 MB and 500,000: the limits are raised for this measurement only (save and load
    # read them from these modules)
    from unittest import mock
    from tracejit.serialize import archive, limits, loader
    with mock.patch.object(archive, "MAX_HEADER", 64 << 20), mock.patch.object(loader, "MAX_HEADER", 64 << 20), \
            mock.patch.object(limits, "MAX_JSON_ITEMS", 4_000_000), mock.patch.object(limits, "MAX_NODES", 400_000):
        _measure(name, model, example)


def _measure(name: str, model, example) -> None:
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        traced = tracejit.trace(model, example, check_trace=False)
        buf = io.BytesIO()
        tracejit.save(traced, buf)
        size = len(buf.getvalue())
        loaded = tracejit.load(io.BytesIO(buf.getvalue()))
        t = time.perf_counter()
        loaded(*example)
        took = time.perf_counter() - t
    work = getattr(call_budget._CALL, "work", 0)
    elements = getattr(call_budget._CALL, "elements", 0)
    limit = call_budget.TOTAL_WORK_FACTOR * call_budget.WORK_FACTOR * max(limits.max_elements(size),
                                                                          call_budget.CALL_FACTOR * elements)
    codes = [fn.code for m in loaded.modules() for fn in m._traced_methods.values()] \
        if hasattr(loaded, "modules") else [loaded.code]
    counting = any("_tj_budget" in c and "_tj_budget_root" not in c.split("\n", 3)[-1] for c in codes)
    print(f"{name:10s} file {size / 1e6:8.1f} MB  call {took:6.2f} s  counted work {work:.3e}  limit {limit:.3e}  "
          f"ratio {work / limit:.2e}  every op counted: {counting}", flush=True)


if __name__ == "__main__":
    os.environ.setdefault("TRACEJIT_CACHE_DIR", "")
    for name in sys.argv[1:] or list(MODELS):
        measure(name)
