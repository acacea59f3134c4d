"""CLI frictions of issue #22 item 5: ``trace --no-strict``; ``run`` without ``--input`` on keyword and
nested inputs (made from the recorded types); ``migrate`` of a ``trace_module`` archive keeps every
traced method (``--method NAME --input ...`` per method; naming some keeps only those; never a
silent drop)."""
from __future__ import annotations

import sys
import textwrap

import pytest
import torch

import tracejit
from tracejit import cli


def _cli(capsys, *argv):
    try:
        code = cli.main(list(argv))
    except SystemExit as e:
        code = e.code
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.fixture
def factories(tmp_path, monkeypatch):
    (tmp_path / "dict_models.py").write_text(textwrap.dedent("""
        import torch
        class Heads(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.a, self.b = torch.nn.Linear(6, 3), torch.nn.Linear(6, 2)
            def forward(self, x):
                return {"a": self.a(x), "b": [self.b(x), x.sum(1)]}
        def heads():
            return Heads()
    """))
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path
    sys.modules.pop("dict_models", None)


def test_trace_no_strict_traces_dict_outputs(factories, capsys):
    code, _, err = _cli(capsys, "trace", "dict_models:heads", "-i", "float32[2,6]", "-o", "h.tjit")
    assert code == 1 and "strict=False" in err and "--no-strict" in err
    code, out, err = _cli(capsys, "trace", "dict_models:heads", "-i", "float32[2,6]", "-o", "h.tjit", "--no-strict")
    assert code == 0, err
    loaded = tracejit.load(factories / "h.tjit")
    torch.manual_seed(0)
    model = __import__("dict_models").heads().eval()
    x = torch.randn(5, 6)   # another batch size than the trace's
    got, expected = loaded(x), model(x)
    assert list(got) == ["a", "b"] and isinstance(got["b"], list)
    torch.testing.assert_close(got["a"], expected["a"])
    torch.testing.assert_close(got["b"][1], expected["b"][1])


class Nested(torch.nn.Module):
    def forward(self, pair, scale, *, mask, flag=True):
        x, extra = pair
        return (x * scale + extra["bias"].sum()) * mask if flag else x


def test_run_makes_keyword_and_nested_inputs_from_the_recorded_types(tmp_path, capsys):
    example = dict(pair=(torch.randn(2, 3), {"bias": torch.randn(4)}), scale=torch.randn(3),
                   mask=torch.ones(2, 3, dtype=torch.long))
    path = tmp_path / "n.tjit"
    tracejit.save(tracejit.trace(Nested(), example_kwarg_inputs=example), path)
    code, out, err = _cli(capsys, "run", str(path), "-n", "2")
    assert code == 0, err
    assert "on pair=(float32[2, 3], {'bias': float32[4]}), scale=float32[3], mask=int64[2, 3]" in out
    assert "output: float32[2, 3]" in out


def test_run_makes_valid_token_inputs(tmp_path, capsys):
    """Integer inputs made from the types are 0 or 1: ids, masks and token types of any model accept them."""
    class Encode(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.types = torch.nn.Embedding(2, 4)   # two token types: an id of 2 or more would raise

        def forward(self, input_ids, token_type_ids):
            return self.types(token_type_ids) + input_ids.unsqueeze(-1)
    ids = torch.randint(0, 100, (2, 5))
    path = tmp_path / "t.tjit"
    tracejit.save(tracejit.trace(Encode().eval(), example_kwarg_inputs=dict(input_ids=ids, token_type_ids=ids % 2)),
                  path)
    code, out, err = _cli(capsys, "run", str(path), "-n", "1")
    assert code == 0, err
    assert "on input_ids=int64[2, 5], token_type_ids=int64[2, 5]" in out


class TwoMethods(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 2)

    def forward(self, x):
        return self.lin(x)

    def encode(self, x, y):
        return self.lin(x).relu() + y


@pytest.fixture
def archive(tmp_path):
    torch.manual_seed(0)
    model = TwoMethods().eval()
    scripted = torch.jit.trace_module(model, {"forward": torch.randn(1, 4),
                                              "encode": (torch.randn(2, 4), torch.randn(2, 2))})
    path = tmp_path / "two.pt"
    torch.jit.save(scripted, str(path))
    return model, str(path)


def test_migrate_keeps_every_traced_method(archive, tmp_path, capsys):
    model, path = archive
    out_path = tmp_path / "two.tjit"
    code, out, err = _cli(capsys, "migrate", path, "-o", str(out_path), "-i", "float32[1,4]",
                          "--method", "encode", "-i", "float32[2,4]", "-i", "float32[2,2]")
    assert code == 0, err
    assert "methods forward, encode" in out
    loaded = tracejit.load(out_path)
    x, y = torch.randn(3, 4), torch.randn(3, 2)   # other batch sizes than the examples'
    torch.testing.assert_close(loaded(x), model(x))
    torch.testing.assert_close(loaded.encode(x, y), model.encode(x, y))


def test_migrate_never_drops_a_method_silently(archive, tmp_path, capsys):
    _, path = archive
    code, out, err = _cli(capsys, "migrate", path, "-o", str(tmp_path / "f.tjit"), "-i", "float32[1,4]")
    assert code == 2 and out == ""
    assert "the archive holds the traced methods forward, encode" in err and "--method NAME" in err
    assert not (tmp_path / "f.tjit").exists()


def test_migrate_method_picks(archive, tmp_path, capsys):
    model, path = archive
    out_path = tmp_path / "e.tjit"
    code, out, err = _cli(capsys, "migrate", path, "-o", str(out_path), "--method", "encode", "-i", "float32[2,4]",
                          "-i", "float32[2,2]")
    assert code == 0, err
    assert "methods encode; left out forward" in out
    loaded = tracejit.load(out_path)
    x, y = torch.randn(5, 4), torch.randn(5, 2)
    torch.testing.assert_close(loaded.encode(x, y), model.encode(x, y))
    code, _, err = _cli(capsys, "migrate", path, "-o", str(out_path), "--method", "decode", "-i", "float32[2,4]")
    assert code == 1 and "has no method 'decode'" in err
