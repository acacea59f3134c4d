"""The non-finite input check of backends/fallback.py, computed by the exported model itself.

A program whose runtime computes some op otherwise than eager on NaN / inf (``fallback.NONFINITE_DIFFERS``)
must run the traced program for a call with a non-finite float input. Summing each input in torch before
the run costs more than the sum: any torch call between two runs slows the next run (onnxruntime, a small
ViT at batch 1, one thread: 103 -> 117 us per call for a sum of 2.5 us alone; the same sum inside the model,
+3 us). So ``add_input_sums`` appends to the ONNX model one ``ReduceSum`` output per floating-point input
(``tracejit_input_sum_<k>``, after every other output), and the backend reads them after the run: a sum
that is not finite (NaN or inf in the input, or an overflow, which only costs the safe path) discards the
run's answer and calls the traced program. The runtime's run has no effect outside its outputs, so
checking after it gives the same answers as checking before.

>>> import onnx
>>> from onnx import helper, TensorProto
>>> x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])
>>> y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])
>>> model = helper.make_model(helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g", [x], [y]))
>>> add_input_sums(model)
1
>>> [o.name for o in model.graph.output]
['y', 'tracejit_input_sum_0']
>>> finite([None, 3.0], 1), finite([None, float("nan")], 1)
(True, False)
>>> ids = helper.make_tensor_value_info("ids", TensorProto.INT64, [2])
>>> no_float_inputs(helper.make_model(helper.make_graph([], "g", [ids], []))), no_float_inputs(model)
(True, False)
>>> z = helper.make_tensor_value_info("z", TensorProto.FLOAT8E4M3FN, [2])   # a type nobody listed: no sums
>>> add_input_sums(helper.make_model(helper.make_graph([], "g", [z], [])))
0
"""
from __future__ import annotations

import math

from ..export._deps import require

SUM_PREFIX = "tracejit_input_sum_"

# ONNX element types of floating-point inputs: float and double are summed as they are; the 16-bit ones
# are cast to float first (a sum of half values overflows where the values are finite)
_FLOAT, _DOUBLE = 1, 11
_CAST_FIRST = (10, 16)   # FLOAT16, BFLOAT16
# types that hold no NaN / inf (integers, bool, string) or that torch's check does not read (complex)
_NO_CHECK = (2, 3, 4, 5, 6, 7, 8, 9, 12, 13, 14, 15, 21, 22)


def add_input_sums(proto) -> int:
    """Append one scalar ``ReduceSum`` output per floating-point input of the ONNX model ``proto`` (in place,
    after its other outputs, in input order); returns how many. Default-deny: a model with an input of a type
    listed nowhere here (a float8) gets none, and 0 is returned: the caller then checks the arguments in torch
    (fallback.with_finite_check)."""
    helper = require("onnx").helper
    graph, count = proto.graph, 0
    if any(v.type.tensor_type.elem_type not in (_FLOAT, _DOUBLE, *_CAST_FIRST, *_NO_CHECK) for v in graph.input):
        return 0
    for value in graph.input:
        elem = value.type.tensor_type.elem_type
        if elem in _NO_CHECK:
            continue
        name, source = f"{SUM_PREFIX}{count}", value.name
        if elem in _CAST_FIRST:
            source = f"{name}_float"
            graph.node.append(helper.make_node("Cast", [value.name], [source], to=_FLOAT, name=source))
        graph.node.append(helper.make_node("ReduceSum", [source], [name], keepdims=0, name=name))
        graph.output.append(helper.make_tensor_value_info(name, _DOUBLE if elem == _DOUBLE else _FLOAT, []))
        count += 1
    return count


def no_float_inputs(proto) -> bool:
    """Does every input of the ONNX model ``proto`` have a type that holds no NaN / inf (integers, bool)?
    Then no call can bring one and there is nothing to check."""
    return all(v.type.tensor_type.elem_type in _NO_CHECK for v in proto.graph.input)


def finite(results, count: int) -> bool:
    """Are the last ``count`` of a run's ``results`` (the input sums) finite?"""
    return all(math.isfinite(s) for s in results[len(results) - count:])
