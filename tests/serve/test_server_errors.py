"""Errors a server sees (issue #22 item 4, codegen/compiler.py, runtime/traced.py): an exception raised
inside a loaded program carries a note with each generated line it passed and the user source line
recorded for it, in every traceback (the interpreter's default one too); generated code has
tracejit-minted file names, never a string from the file; a wrong argument is summarized, never
printed whole."""
from __future__ import annotations

import os
import re
import subprocess
import sys
import traceback

import numpy as np
import pytest
import torch

import filesurgery
import tracejit


class CNN(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(3, 4, 3)
        self.fc = torch.nn.Linear(4, 2)

    def forward(self, x):
        y = self.conv1(x).relu()   # the line a wrong channel count fails under
        return self.fc(y.mean((2, 3)))


CONV_LINE = next(i for i, line in enumerate(open(__file__), 1) if "the line a wrong channel count" in line)


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    path = tmp_path_factory.mktemp("err") / "cnn.tjit"
    tracejit.save(tracejit.trace(CNN().eval(), (torch.randn(1, 3, 8, 8),)), path)
    return path


def _raised(program, *args) -> BaseException:
    with pytest.raises(Exception) as info:
        program(*args)
    return info.value


@pytest.mark.parametrize("how", ["loaded", "optimized", "live"])
def test_an_error_inside_names_the_generated_line_and_the_source_line(saved, how):
    if how == "live":
        program = tracejit.trace(CNN().eval(), (torch.randn(1, 3, 8, 8),))
    else:
        program = tracejit.load(saved)
        if how == "optimized":
            program = tracejit.optimize_for_inference(program)
    program(torch.randn(2, 3, 11, 9))   # other sizes run
    e = _raised(program, torch.randn(1, 5, 8, 8))   # 5 channels: conv2d raises inside the program
    assert isinstance(e, RuntimeError) and "to have 3 channels" in str(e)
    text = "".join(traceback.format_exception(e))
    assert "in the traced program:" in text
    if how == "optimized":   # one inlined graph: the conv (torch's or a oneDNN kernel, whichever the cost rule
        # chose for this size) on x, traced from torch's conv layer
        assert re.search(r"<tracejit:[A-Za-z0-9_.]+#\d+> line \d+: \w+ = \S+\(x\b", text), text
        assert re.search(r"traced from \S+/torch/nn/modules/conv.py:\d+ \(in _conv_forward\)", text), text
        return
    assert re.search(r"<tracejit:[A-Za-z0-9_.]+#\d+> line \d+: \w+ = .*conv2d\(", text), text
    assert f"traced from {__file__}:{CONV_LINE} (in forward)" in text
    if how == "loaded":
        frames = [f.filename for f in traceback.extract_tb(e.__traceback__) if f.filename.startswith("<tracejit")]
        assert frames and all(re.fullmatch(r"<tracejit:loaded(\.graph\d+)?#\d+>", f) for f in frames)


def test_the_default_excepthook_shows_the_note(saved):
    """The interpreter's own traceback printer does not read linecache for <...> names: the note does."""
    code = f"import torch, tracejit; tracejit.load({str(saved)!r})(torch.randn(1, 5, 8, 8))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, PYTHONPATH=os.getcwd()))
    assert done.returncode == 1
    assert "in the traced program:" in done.stderr and "torch.conv2d(" in done.stderr
    assert f"traced from {__file__}:{CONV_LINE}" in done.stderr


def test_a_file_never_names_generated_code_and_its_strings_are_escaped(saved, tmp_path):
    hostile = "evil\n\x1b[2J<tracejit:x#1>"

    def edit(node):
        if isinstance(node, dict):
            if "source" in node and isinstance(node["source"], list):
                node["source"][0] = hostile
            for key in ("name", "original_name", "type_name"):
                if isinstance(node.get(key), str) and node.get(key) in ("CNN", "Conv2d", "Linear"):
                    node[key] = "Evil_Name"
            for v in node.values():
                edit(v)
        elif isinstance(node, list):
            for v in node:
                edit(v)

    path = tmp_path / "h.tjit"
    path.write_bytes(filesurgery.rewrite(saved.read_bytes(), edit_doc=edit))
    e = _raised(tracejit.load(path), torch.randn(1, 5, 8, 8))
    frames = [f.filename for f in traceback.extract_tb(e.__traceback__) if f.filename.startswith("<tracejit")]
    assert frames and all(re.fullmatch(r"<tracejit:loaded(\.graph\d+)?#\d+>", f) for f in frames)
    note = "\n".join(e.__notes__)
    assert "traced from evil\\n\\x1b[2J<tracejit:x#1>:" in note and "\x1b" not in note


def test_no_note_on_guard_errors_and_argument_errors(saved):
    """Their messages say what was expected and seen; a note of the input-check line would be noise."""
    e = _raised(tracejit.load(saved), np.ones((1, 3, 8, 8)))
    assert isinstance(e, tracejit.errors.ArgumentTypeError) and not getattr(e, "__notes__", None)

    def needs_even_width(x):
        if x.shape[-1] % 2:
            return x + 1
        return x * 2
    with pytest.warns(tracejit.TracerWarning):
        traced = tracejit.trace(needs_even_width, (torch.randn(2, 4),))
    traced.drop_original()
    e = _raised(traced, torch.randn(2, 5))
    assert isinstance(e, tracejit.GuardError) and not getattr(e, "__notes__", None)


@pytest.mark.parametrize("value,summary", [
    (np.zeros((1, 3, 20, 20)), "numpy.ndarray(shape=(1, 3, 20, 20), dtype=float64)"),
    ("x" * 5000, "str 'xxxxxxxxxx"),
    (list(range(10000)), "list of length 10000"),
])
def test_a_wrong_argument_is_summarized(saved, value, summary):
    e = _raised(tracejit.load(saved), value)
    assert isinstance(e, tracejit.errors.ArgumentTypeError)
    assert summary in str(e) and len(str(e)) < 200, str(e)
