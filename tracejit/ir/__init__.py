from .graph import (Graph, Node, Value, TensorType, ScalarType, SourceLoc, PLAIN_ATTR_TYPES, is_plain, iter_values,
                    map_values, nodes_with_callees)
from .printer import format_graph
from .target import CallTarget, CallTargetError, target_text
from .ops import OPS, GUARD, GUARD_TESTS, GUARD_KINDS, BOOL_TESTS, guard_arity, guard_expr
from .verify import verify, VerificationError

__doc__ = graph.__doc__
