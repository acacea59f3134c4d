"""Acceptance for issue #22: tiny BERT, GPT-2, ViT and T5 traced with ``tracejit trace --hf`` and in
Python, saved, loaded in a fresh process (serve_child.py: one for all the programs) and called with
what clients send: the tokenizer's dict, every key, at batch 1, 3, 8, lengths 1, 2, 13, 64 and padded
batches. Every call equals eager transformers, keeps the output class, and its attribute, key and
index access (serve_child.check).

Length 1 fails a guard of the batch-2, length-8 trace (sdpa attention's ``q_length > 1``): the file
serves it with the specializations it holds (``--hf`` checks the serving shapes, which specializes
the live object; in Python, ``specialize_for``), no GuardError.

A client whose tokenizer leaves out an input the forward has a default for (``return_token_type_ids
=False``, ``return_attention_mask=False``) is served too, from specializations traced without it
(``--hf`` makes them for every such set; in Python, ``specialize_for`` with fewer keys)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings

import pytest
import torch

transformers = pytest.importorskip("transformers")

import tracejit  # noqa: E402
from tracejit import cli  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import tiny_models  # noqa: E402
from once_per_run import each_once_per_run  # noqa: E402

TEXT_CASES = {f"b{b}_n{n}": [b, [n]] for b in (1, 3, 8) for n in (1, 2, 13, 64)}
TEXT_CASES.update({"padded_b3": [3, [2, 13, 5]], "padded_b8": [8, [64, 1, 13, 7]]})
IMAGE_CASES = {f"b{b}": [b, [1]] for b in (1, 3, 8)}
OMIT_SHAPES = {"b1_n1": [1, [1]], "b1_n2": [1, [2]], "b3_n13": [3, [13]], "padded_b8": [8, [64, 1, 13, 7]]}
CASES = {name: dict(IMAGE_CASES if name == "vit" else TEXT_CASES,
                    **{f"no_{'_'.join(omit)}_{shape}": [b, lengths, list(omit)]
                       for omit in tiny_models.OMITTABLE[name] for shape, (b, lengths) in OMIT_SHAPES.items()})
         for name in tiny_models.NAMES}
# T5's decoder length apart from the encoder's: a generation step (one decoder token beside texts of
# any length), a long target beside a one-word text, padded targets
CASES["t5"].update({"dec1_b1_n64": [1, [64], [], [1]], "dec1_b3_n13": [3, [13], [], [1]],
                    "dec1_padded_b8": [8, [64, 1, 13, 7], [], [1]], "dec13_b1_n1": [1, [1], [], [13]],
                    "dec20_b3_n2": [3, [2], [], [20]], "dec_padded_b3": [3, [2, 13, 5], [], [13, 1, 4]],
                    "dec1_no_attention_mask_b3_n13": [3, [13], ["attention_mask"], [1]]})
VARIANTS = ("cli", "python")


@pytest.fixture(scope="module")
def _offline(tmp_path_factory):
    old = os.environ.get("HF_HUB_OFFLINE")
    os.environ["HF_HUB_OFFLINE"] = "1"
    yield
    if old is None:
        os.environ.pop("HF_HUB_OFFLINE")
    else:
        os.environ["HF_HUB_OFFLINE"] = old


def _trace_in_python(name: str, directory: str):
    """What a user writes: the model, a tokenizer batch as keyword inputs, strict=False (dict outputs),
    and requests of the other shapes a server meets as ``specialize_for`` (length 1: sdpa attention's
    ``q_length > 1``; length 2: T5's decoder of length 1 beside an encoder of 2), also as the clients
    whose tokenizers leave an input out send them."""
    model = tiny_models.build(name)
    more = [tiny_models.request(name, directory, batch, lengths, 2, omit)
            for omit in [()] + tiny_models.OMITTABLE[name] for batch, lengths in ([2, [8, 5]], [1, [1]], [1, [2]])]
    if name == "t5":   # the decoder's length 1 beside a longer text, and the other way round
        more += [tiny_models.request(name, directory, 1, lengths, 2, omit, decoder_lengths)
                 for omit in [(), ("attention_mask",)] for lengths, decoder_lengths in ([[13], [1]], [[1], [13]])]
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore", tracejit.TracerWarning)
        return tracejit.trace(model, example_kwarg_inputs=tiny_models.request(name, directory, 2, [8, 5], 1),
                              strict=False, specialize_for=more)


@pytest.fixture(scope="module")
def served(tmp_path_factory, _offline):
    """``"<model>/<variant>/<case>"`` -> what the fresh process saw ("ok" or the failure). Each model is built
    once per run, by whichever xdist worker claims it first (tests/once_per_run.py): the workers split them."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.getcwd(), os.environ.get("PYTHONPATH", "")]),
               OMP_NUM_THREADS="1")   # tiny models: one thread each, so no process's OpenMP team waits on a core
    threads = torch.get_num_threads()   # another process holds (this one traces meanwhile, at one thread too)
    torch.set_num_threads(1)
    try:
        parts = each_once_per_run(tmp_path_factory, "serve_hf", tiny_models.NAMES,
                                  lambda name, root: _trace_and_serve(root, env, name))
    finally:
        torch.set_num_threads(threads)
    return {key: seen for part in parts.values() for key, seen in part.items()}


def _trace_and_serve(root, env, name: str) -> dict:
    """``name`` traced with ``trace --hf`` and in Python, both saved, and served by a fresh process."""
    directory = tiny_models.save(name, str(root / name))
    path = str(root / f"{name}-cli.tjit")
    assert cli.main(["trace", "--hf", directory, "-o", path]) == 0
    programs = {f"{name}/cli": [name, path, directory]}
    path = str(root / f"{name}-python.tjit")
    tracejit.save(_trace_in_python(name, directory), path)
    programs[f"{name}/python"] = [name, path, directory]
    plan = root / f"plan-{name}.json"
    plan.write_text(json.dumps({"programs": programs, "cases": CASES}))
    child = subprocess.Popen([sys.executable, os.path.join(HERE, "serve_child.py"), str(plan)],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        out, err = child.communicate(timeout=300)
    finally:   # a failure above leaves no server process behind
        if child.poll() is None:
            child.kill()
            child.communicate()
    assert child.returncode == 0, err[-3000:]
    return json.loads(out.strip().splitlines()[-1])


def _params():
    for name in tiny_models.NAMES:
        for variant in VARIANTS:
            for case in CASES[name]:
                yield pytest.param(name, variant, case, id=f"{name}-{variant}-{case}")


@pytest.mark.parametrize("name,variant,case", list(_params()))
def test_a_loaded_program_serves_tokenizer_requests(served, name, variant, case):
    assert served[f"{name}/{variant}/{case}"] == "ok"


def test_the_requests_move_the_outputs(tmp_path, _offline):
    """The cases are not trivial: other requests give other outputs (so "equals eager" says something)."""
    for name in tiny_models.NAMES:
        directory = tiny_models.save(name, str(tmp_path / name))
        model = tiny_models.build(name)
        a = model(**tiny_models.request(name, directory, 3, [13], 1))
        b = model(**tiny_models.request(name, directory, 3, [13], 2))
        assert not torch.allclose(a[0], b[0]), name
        if name == "bert":   # token_type_ids move BERT's output: a trace that left them out would differ
            req = tiny_models.request(name, directory, 3, [13], 1)
            other = dict(req, token_type_ids=1 - req["token_type_ids"])
            assert not torch.allclose(model(**req)[0], model(**other)[0])
        for omit in tiny_models.OMITTABLE[name]:   # the tokenizer leaves them out (a single text's type ids
            full = tiny_models.request(name, directory, 3, [13, 2], 1)   # are zeros, the default: that the
            less = tiny_models.request(name, directory, 3, [13, 2], 1, omit)   # trace keeps them is
            assert set(full) - set(less) == set(omit)                  # test_omitted_inputs.py's)
            if "attention_mask" in omit:   # no mask on a padded batch: the padding is attended to
                assert not torch.allclose(model(**full)[0], model(**less)[0]), (name, omit)
