"""``tracejit export FILE -o FILE.onnx [--opset N] [--triton DIR [--name NAME] [--max-batch-size N]]``:
write a saved program as an ONNX model (tracejit.export_onnx) and/or a Triton Inference Server model
repository (tracejit.export.triton), and print the model's signature: inputs with their dynamic axes
by name, outputs, opset, node count, and what became of the trace's guards.

The file is read as a Program (``serialize.read_program``: decoded and validated, no runtime object built)
and exported from it; loading runs no code from the file. A file that does not load and a program that does not export
(an op without conversion: the error names the ATen op and the source line) exit with status 2."""
from __future__ import annotations

import argparse
import os
import warnings

from ..errors import TracerWarning
from ..export._deps import require
from ..export.errors import ExportError
from ..export.guards import GUARD_OP, _pinned_input_dim
from ..export.onnx_export import export_onnx, traced_graph
from ..export.triton import MODEL_FILE, VERSION, model_config, repository_name, with_triton_names, write_files
from .common import CLIError, escape, plural, read_program, short_path

onnx = require("onnx")   # the onnx extra (cli/verbs.py imports this module for the export verb only)
from .specs import DEBUG_HELP, FORMATTER, wrap

USAGE_ERROR = 2


def register(sub) -> None:
    p = sub.add_parser(
        "export", formatter_class=FORMATTER, help="write a saved program as ONNX, or as a Triton model repository",
        description=wrap("Load a saved program (no code runs), convert its traced method to an ONNX model with "
                         "tracejit.export_onnx (every input dimension a named dynamic axis, checked by "
                         "onnx.checker) and write it with -o, and/or write a Triton Inference Server model "
                         "repository for the onnxruntime backend with --triton (DIR/NAME/config.pbtxt and "
                         "DIR/NAME/1/model.onnx). Prints the inputs, outputs, opset and node count."),
        epilog="examples:\n  tracejit export model.tjit -o model.onnx\n"
               "  tracejit export model.tjit --triton models --name mlp --max-batch-size 8\n"
               "  tritonserver --model-repository models")
    p.add_argument("file", metavar="FILE", help="a program saved by tracejit.save or 'tracejit trace'")
    p.add_argument("--output", "-o", metavar="ONNX", help="where to write the ONNX model")
    p.add_argument("--opset", type=int, metavar="N", help="ONNX opset to write (default 18, the lowest supported)")
    p.add_argument("--method", default="forward", help="the traced method to export (default forward)")
    p.add_argument("--max-nodes", type=int, metavar="N", default=None,
                   help="export a method of at most N nodes, submodule calls inlined (default 10,000: over 10x "
                        "BERT-base's 727 and ResNet-50's 549; a file's nodes cost about 0.5 ms each to lower)")
    p.add_argument("--guard-outputs", action="store_true",
                   help="export each guard the model cannot check at its entry (a value read in Python, the size of "
                        "a tensor whose shape depends on the data) as a boolean output tracejit_guard_<k>, True "
                        "where it holds; the caller must check them, or it can get the traced branch's answer for "
                        "other data (default: such value guards refuse the export)")
    p.add_argument("--triton", metavar="DIR", help="write a Triton model repository entry under DIR")
    p.add_argument("--name", help="the Triton model name (default: the traced module's or function's name)")
    p.add_argument("--max-batch-size", type=int, metavar="N", default=None,
                   help="Triton's max_batch_size: N > 0 batches on dimension 0 (left out of the config's dims, "
                        "dynamic batching on); 0: full shapes, no batching (default: 4 when every input and "
                        "output has dimension 0 as a shared dynamic batch axis, else 0)")
    p.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help=DEBUG_HELP)
    p.set_defaults(func=cmd_export)


def cmd_export(args) -> int:
    if not args.output and not args.triton:
        raise CLIError("export needs -o FILE.onnx, --triton DIR, or both", USAGE_ERROR)
    if (args.name or args.max_batch_size is not None) and not args.triton:
        raise CLIError("--name and --max-batch-size go with --triton DIR", USAGE_ERROR)
    if args.max_batch_size is not None and args.max_batch_size < 0:
        raise CLIError(f"--max-batch-size must be >= 0; got {args.max_batch_size}", USAGE_ERROR)
    try:
        program = read_program(args.file, map_location="cpu")   # nothing compiled; ONNX is device-free
    except CLIError as e:
        raise CLIError(str(e), USAGE_ERROR) from None
    proto, notes = export(program, args)
    target = args.output or "ONNX model for Triton"
    if args.output:
        _write(proto, args.output)
    print_summary(proto, target, args, notes, pinning_guards(program, args.method))
    if args.triton:
        write_triton(program, proto, args)
    return 0


def export(program, args):
    """The ONNX model of ``program`` and the export's warnings (the guards ONNX cannot check)."""
    return export_quietly(program, args.file, opset=args.opset, method=args.method, max_nodes=args.max_nodes,
                          guard_outputs=args.guard_outputs)


def export_quietly(program, file: str, f=None, **options):
    """``export_onnx(program, f, **options)`` with its TracerWarnings returned as text, not printed;
    an ExportError or a bad option becomes a CLIError (status 2) naming ``file``."""
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", TracerWarning)
            proto = export_onnx(program, f, **options)
    except ExportError as e:
        raise CLIError(f"{file}: cannot export to ONNX: {e}", USAGE_ERROR) from None
    except (ValueError, TypeError) as e:
        raise CLIError(f"{file}: {e}", USAGE_ERROR) from None
    except OSError as e:
        raise CLIError(f"cannot write {f}: {e.strerror or e}") from None
    return proto, [str(w.message) for w in caught if issubclass(w.category, TracerWarning)]


def _write(proto, path: str) -> None:
    try:
        onnx.save(proto, path)
    except OSError as e:
        raise CLIError(f"cannot write {path}: {e.strerror or e}") from None


def value_signature(value) -> tuple:
    """(name, ``float32[x_dim0, 16]``, [dynamic axis names], [static dims]) of an ONNX graph value."""
    t = value.type.tensor_type
    try:
        dtype = onnx.helper.tensor_dtype_to_np_dtype(t.elem_type).name
    except (KeyError, ValueError, TypeError):
        dtype = onnx.TensorProto.DataType.Name(t.elem_type).lower()
    dims, dynamic, static = [], [], []
    for i, d in enumerate(t.shape.dim):
        if d.HasField("dim_value"):
            dims.append(str(d.dim_value))
            static.append(i)
        else:
            dims.append(d.dim_param or "?")
            dynamic.append(d.dim_param or f"dim {i}")
    return value.name, f"{dtype}[{', '.join(dims)}]", dynamic, static


def pinning_guards(program, method: str) -> dict:
    """{(input index, dim): source line of the guard that pins it} (what export made a static dim)."""
    graph = traced_graph(program, method)
    index = {id(v): i for i, v in enumerate(graph.inputs)}
    out = {}
    for node in graph.nodes:
        if node.op == GUARD_OP and node.attrs.get("kind") in ("size", "length"):
            pin = _pinned_input_dim(node, index)
            if pin is not None:
                out.setdefault(pin[0], node.source or node.attrs.get("line"))
    return out


def print_summary(proto, target: str, args, notes: list, pins: dict | None = None) -> None:
    opset = next((o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")), None)
    print(f"{escape(target)}: ONNX opset {opset}, {plural(len(proto.graph.node), 'node')}, "
          f"{plural(len(proto.graph.initializer), 'initializer')} (from {escape(args.file)}, method {args.method})")
    print("inputs:")
    for k, value in enumerate(proto.graph.input):
        name, text, dynamic, static = value_signature(value)
        where = [f"dynamic axes {', '.join(dynamic)}"] if dynamic else []
        for i in static:
            source = (pins or {}).get((k, i))
            where.append(f"dim {i} static: pinned by the guard at {short_path(str(source))}" if source
                         else f"dim {i} static: a guard of the trace pins it")
        print(escape(f"  {name}: {text}" + (f"  ({'; '.join(where)})" if where else "")))   # a guard's source too
    print("outputs:")
    for value in proto.graph.output:
        name, text, _, _ = value_signature(value)
        print(escape(f"  {name}: {text}"))
    meta = {p.key: p.value for p in proto.metadata_props}
    unchecked = meta.get("tracejit.unchecked_guards")
    checked = meta.get("tracejit.guard_outputs")
    in_graph = meta.get("tracejit.checked_guards")
    if in_graph:
        print("guards the model checks itself (a run where one fails stops with an error naming its check node):")
        for line in in_graph.splitlines():
            print(f"  {escape(line)}")
    if checked:
        print("guard outputs (True where the guard holds; a caller must check them, else the other outputs can be "
              "the traced branch's answer for other data):")
        for line in checked.splitlines():
            print(f"  {escape(line)}")
    if unchecked:
        print("guards ONNX cannot check (the model keeps the traced branch for any size; listed in the model's "
              "metadata 'tracejit.unchecked_guards'):")
        for line in unchecked.splitlines():
            print(f"  {escape(line)}")
    elif notes:
        for note in notes:
            print(f"note: {escape(note)}")


def write_triton(program, proto, args) -> None:
    name = repository_name(program, args.name)
    proto = with_triton_names(proto)
    try:
        config = model_config(proto, traced_graph(program, args.method), name, args.max_batch_size)
    except ExportError as e:
        raise CLIError(f"{args.file}: cannot write a Triton repository: {e}", USAGE_ERROR) from None
    try:
        model_dir = write_files(proto, config, args.triton)
    except OSError as e:
        raise CLIError(f"cannot write the Triton repository {args.triton}: {e.strerror or e}") from None
    batching = f"max_batch_size {config.max_batch_size}, dynamic batching" if config.max_batch_size \
        else "max_batch_size 0 (full shapes, no batching)"
    print(f"triton: {escape(os.path.join(model_dir, 'config.pbtxt'))} and "
          f"{escape(os.path.join(model_dir, VERSION, MODEL_FILE))} ({batching}); serve with "
          f"`tritonserver --model-repository {escape(args.triton)}`")
