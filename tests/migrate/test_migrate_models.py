"""Every model of the real-model corpus (tests/models): torch.jit.trace -> torch.jit.save ->
tracejit.migrate -> tracejit.save / load, compared with the TorchScript archive on the ALT
inputs (other batch sizes, lengths, image sizes, padding), which the migration never saw."""
from __future__ import annotations

import importlib.util
import warnings

import pytest
import torch

import tracejit

pytestmark = pytest.mark.skipif(any(importlib.util.find_spec(m) is None for m in ("transformers", "safetensors")),
                                reason="the model corpus needs the test extras (transformers, safetensors)")

if not pytestmark.args[0]:
    from model_corpus import SPECS, assert_outputs_equal, built_case, run

    MODELS = sorted(SPECS)
else:   # pragma: no cover
    MODELS = []


def _archive(case, tmp_path):
    path = tmp_path / f"{case.name}.pt"
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.jit.save(torch.jit.trace(case.wrapper, case.example, check_trace=False), str(path))
    return path


@pytest.mark.parametrize("model", MODELS)
def test_migrated_model_matches_the_archive_on_new_inputs(model, tmp_path):
    case = built_case(model)
    path = _archive(case, tmp_path)
    archive = torch.jit.load(str(path))
    migrated = tracejit.migrate(str(path), case.example)
    tracejit.save(migrated, tmp_path / "m.tjit")
    reloaded = tracejit.load(tmp_path / "m.tjit")
    assert isinstance(reloaded, tracejit.TracedModule)
    for alt in case.spec.alts:
        inputs = case.inputs[alt]
        want = run(archive, inputs)
        assert_outputs_equal(run(migrated, inputs), want, f"{model} migrated, {alt}")
        assert_outputs_equal(run(reloaded, inputs), want, f"{model} migrated and reloaded, {alt}")
        # the ALT inputs move the outputs: they are not the example's
        example_out = run(archive, case.example)
        assert any(a.shape != b.shape or not torch.allclose(a, b) for a, b in zip(want, example_out))
