"""A tokenizer's output traced as it comes (serve25): ``tracejit.trace(model, example_kwarg_inputs=
tokenizer(texts, padding=True, return_tensors="pt"))``. A ``BatchEncoding`` is a ``UserDict``, not a
dict: tracejit refused it ("should be a dict"), as torch.jit.trace still does. Traced from one, the
program (live and loaded) answers other encodings (batch 1, left padding, other lengths) like eager."""
from __future__ import annotations

import os
import sys
import warnings

import pytest
import torch

transformers = pytest.importorskip("transformers")

import tracejit  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tiny_models  # noqa: E402


def _texts(lengths, seed):
    g = torch.Generator().manual_seed(seed)
    return [" ".join(f"w{int(i)}" for i in torch.randint(0, 95, (n,), generator=g)) for n in lengths]


def test_a_batch_encoding_is_an_example_and_new_encodings_match_eager(tmp_path):
    model = tiny_models.build("bert")
    tok = tiny_models.tokenizer("bert")
    example = tok(_texts([8, 5], 0), padding=True, return_tensors="pt")
    assert not isinstance(example, dict)   # what torch.jit.trace refuses
    with pytest.raises(RuntimeError, match="should be a dict"):
        torch.jit.trace(model, example_kwarg_inputs=example, strict=False)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore", tracejit.TracerWarning)
        traced = tracejit.trace(model, example_kwarg_inputs=example, strict=False)
    tracejit.save(traced, str(tmp_path / "bert.tjit"))
    loaded = tracejit.load(str(tmp_path / "bert.tjit"))
    for side, lengths, seed in (("right", [13, 2, 7], 1), ("left", [6, 11, 1], 2)):
        tok.padding_side = side
        enc = tok(_texts(lengths, seed), padding=True, return_tensors="pt")
        with torch.no_grad():
            want = model(**enc)
            for program in (traced, loaded):
                got = program(**enc)
                assert list(got.keys()) == list(want.keys())
                for key in want.keys():
                    torch.testing.assert_close(got[key], want[key], rtol=1e-4, atol=1e-4)


def test_a_mapping_with_other_keys_is_still_refused():
    class Keyed:   # not a mapping
        pass
    with pytest.raises(tracejit.ArgumentTypeError, match="should be a dict of keyword arguments.*got Keyed"):
        tracejit.trace(torch.nn.Linear(2, 2), example_kwarg_inputs=Keyed())
    from collections import UserDict
    with pytest.raises(tracejit.ArgumentTypeError, match="got UserDict"):
        tracejit.trace(torch.nn.Linear(2, 2), example_kwarg_inputs=UserDict({0: torch.ones(2)}))
