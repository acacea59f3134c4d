"""The op registry: what tracejit knows about each op, in one place, below every layer that asks.

  names.py      the one op-name parser (split_name) and the names of tracejit's own ops
  aten.py       ATen op facts derived from torch's tags and schemas: random, dropout, pointwise,
                in-place, aliasing, generator, fresh memory, in-place twins, splits, schema_of
  overrides.py  the one reviewed table of facts torch does not state, each with its reason
  purity.py     droppable (DCE) and mergeable (CSE)
  convs.py      the convolution ops the inference passes rewrite

tracejit's own ops (attribute schema, purity, printing) are the OpDef table of ir/ops.py. Modules
here import only torch and ir/; docs/DESIGN.md "The op registry" says how to add an op.
"""
from .aten import (draws_random, inplace_twin, is_fresh, splits_into_views, has_data_dependent_shape, exact_schema, functional_of, is_dropout, is_inplace, is_mergeable, is_pointwise, is_random,
                   may_alias, schema_of, schemas_of, takes_generator)
from .names import OpName, base_name, split_name
from .purity import droppable, mergeable

__all__ = ["inplace_twin", "is_fresh", "splits_into_views", "has_data_dependent_shape", "OpName", "base_name", "split_name", "schema_of", "schemas_of", "exact_schema", "is_random", "draws_random", "takes_generator",
           "is_dropout", "is_pointwise", "is_inplace", "functional_of", "may_alias", "is_mergeable",
           "droppable", "mergeable"]
