"""The exported model's checks (``onnx.checker``, full, and strict ONNX shape inference) on a copy without the
weights' bytes.

Both serialize the model they get, and shape inference parses its answer back: on the whole model that held
about seven copies of the weights at once (vgg11_bn, 506 MB of weights: a peak of 3.4 GB), and a model over
protobuf's 2 GB could not be checked at all. The checks read an initializer's type and shape, and the values
of only the small tensors that shape computations take (a Reshape's target, a Slice's bounds), so every
initializer over ``LARGE_BYTES`` is given to them as a graph input of the same type and shape; the
``value_info`` and the output types that shape inference found are copied into the model itself.

>>> import onnx, numpy as np
>>> from onnx import helper, numpy_helper, TensorProto
>>> w = numpy_helper.from_array(np.zeros((256, 256), np.float32), "w")
>>> g = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Relu", ["h"], ["y"])],
...                       "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 256])],
...                       [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 256])], [w])
>>> checked = check_and_infer(onnx, helper.make_model(g))
>>> [v.name for v in checked.graph.value_info], len(checked.graph.initializer)
(['h'], 1)
"""
from __future__ import annotations

LARGE_BYTES = 1 << 16   # an initializer larger than this is checked by its type and shape alone


def check_and_infer(onnx, proto):
    """Run the full checker and strict shape inference (``check_type``) on ``proto`` without its large
    initializers' bytes; return ``proto`` with the inferred ``value_info`` and output types. Raises what
    the checks raise."""
    skeleton = _without_large_initializers(onnx, proto)
    onnx.checker.check_model(skeleton, full_check=True)
    inferred = onnx.shape_inference.infer_shapes(skeleton, check_type=True, strict_mode=True)
    known = {v.name for v in proto.graph.value_info}
    proto.graph.value_info.extend(v for v in inferred.graph.value_info if v.name not in known)
    for output, found in zip(proto.graph.output, inferred.graph.output):   # the outputs' inferred types
        output.CopyFrom(found)
    return proto


def _without_large_initializers(onnx, proto):
    """A copy of ``proto`` whose initializers over LARGE_BYTES are graph inputs of their type and shape."""
    skeleton = _copy_without(proto, "graph")
    skeleton.graph.CopyFrom(_copy_without(proto.graph, "initializer"))
    for t in proto.graph.initializer:
        if t.ByteSize() <= LARGE_BYTES:
            skeleton.graph.initializer.append(t)
        else:
            skeleton.graph.input.append(onnx.helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)))
    return skeleton


def _copy_without(message, skipped: str):
    """A copy of a protobuf ``message`` without its field ``skipped`` (which is never copied)."""
    out = type(message)()
    for field, value in message.ListFields():
        if field.name == skipped:
            continue
        if hasattr(value, "extend"):   # a repeated field
            getattr(out, field.name).extend(value)
        elif hasattr(value, "CopyFrom"):   # a message
            getattr(out, field.name).CopyFrom(value)
        else:
            setattr(out, field.name, value)
    return out
