"""schema_check.arguments: torch's schema arguments read once per schema object, as plain values equal to what
torch says, for every overload of ops with kwarg-only, optional, list and defaulted arguments."""
from __future__ import annotations

import pytest
import torch

from tracejit.ops.aten import schemas_of
from tracejit.serialize import schema_check


@pytest.mark.parametrize("op", ["aten::add", "aten::linear", "aten::layer_norm", "aten::sum", "aten::view",
                                "aten::scaled_dot_product_attention", "aten::gelu", "aten::embedding"])
def test_arguments_are_torchs_and_read_once(op):
    overloads = schemas_of(op)
    assert overloads
    for _, schema in overloads:
        got = schema_check.arguments(schema)
        assert [(a.name, a.kwarg_only, a.type, a.real_type, a.has_default) for a in got] == [
            (a.name, a.kwarg_only, str(a.type), str(a.real_type), a.has_default_value()) for a in schema.arguments]
        assert schema_check.arguments(schema) is got   # cached for this schema object


def test_bind_follows_the_schema_with_the_cached_arguments():
    schema = torch.ops.aten.sum.dim_IntList._schema
    assert schema_check.bind(schema, ["x", [0, 1]], {"keepdim": True}) == {"self": "x", "dim": [0, 1], "keepdim": True}
    assert schema_check.bind(schema, ["x", [0]], {"nope": 1}) is None      # an unknown keyword
    view = torch.ops.aten.view.default._schema
    assert schema_check.bind(view, ["x", 2, 3], {}) == {"self": "x", "size": [2, 3]}   # ints as one int[]
    assert schema_check.bind(view, ["x"], {}) is None                     # size is required
