"""The op registry: what tracejit knows about each op, in one place, below every layer that asks.

  names.py      the one op-name parser (split_name) and the names of tracejit's own ops
  aten.py       ATen op facts derived from torch's tags and schemas: random, dropout, pointwise,
                reduction, in-place, aliasing / splits, generator, fresh memory, in-place twins,
                layout-free, accumulating, schema_of
  overrides.py  the one reviewed table of facts torch does not state, each with its reason, and the
                loader's string vocabularies
  purity.py     droppable (DCE) and mergeable (CSE)
  convs.py      the convolution ops the inference passes rewrite

tracejit's own ops (attribute schema, purity, printing) are the OpDef table of ir/ops.py. Modules
here import only torch and ir/; docs/DESIGN.md "The op registry" says how to add an op.
"""
from ..lazy_module import LazyModule
from .names import OpName, base_name, split_name

# names -> the module that defines them, imported on first use (PEP 562): a server that loads a program from
# the code cache reads ops/names.py and ops/custom.py only, not the ATen facts (issue #22 item 4: start time)
_aten = LazyModule(".aten", __name__)
_overrides = LazyModule(".overrides", __name__)
_purity = LazyModule(".purity", __name__)
_WHERE = {**dict.fromkeys(("accumulates", "draws_random", "exact_overload", "exact_schema", "functional_of", "gives_tensor",
                           "has_data_dependent_shape", "inplace_twin", "is_dropout", "is_fresh", "is_inplace",
                           "is_layout_free", "is_mergeable", "is_pointwise", "is_random", "is_reduction", "may_alias",
                           "outgrows_inputs", "pieces_follow_size", "reads_metadata_only", "reads_values_of",
                           "schema_of", "schemas_of", "shares_memory", "splits_into_views", "step_work", "steps",
                           "takes_generator", "takes_numbers_for_tensors"), _aten),
          "STRING_ARGUMENTS": _overrides, **dict.fromkeys(("droppable", "mergeable"), _purity)}


def __getattr__(name: str):
    where = _WHERE.get(name)
    if where is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(where, name)
    globals()[name] = value
    return value


__all__ = ["OpName", "base_name", "split_name", "schema_of", "schemas_of", "exact_schema", "exact_overload",
           "is_random", "draws_random", "takes_generator", "is_dropout", "is_pointwise", "is_reduction",
           "is_inplace", "functional_of", "may_alias", "splits_into_views", "pieces_follow_size", "shares_memory",
           "inplace_twin",
           "is_fresh", "is_layout_free", "gives_tensor", "accumulates", "outgrows_inputs",
           "takes_numbers_for_tensors", "STRING_ARGUMENTS", "has_data_dependent_shape", "is_mergeable",
           "droppable", "mergeable", "step_work", "steps", "reads_metadata_only", "reads_values_of"]
