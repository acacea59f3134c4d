"""The program's structure at load (issue #21, items 4 and 6), in-process: how far calls and module
paths expand is bounded before anything is decoded, each graph is compiled once whatever the number
of methods naming it, method names never shadow an attribute of the loaded module, and nothing the
TorchScript detector meets escapes as another exception than LoadError."""
from __future__ import annotations

import io

import pytest
import torch

import tracejit
from tracejit.serialize import cached_methods, compile_once, expansion, limits
from security_testlib import graphs, module, rewrite
from catalogue_tools import _chain, _diamonds, _root_methods, _zip, tools_base


@pytest.fixture(scope="module")
def files():
    return tools_base()


def _load(raw):
    return tracejit.load(io.BytesIO(raw))


@pytest.mark.parametrize("depth", [16, 40])
def test_a_chain_of_methods_each_calling_the_next_twice_is_refused(files, depth):
    with pytest.raises(tracejit.LoadError, match=r"calls expand to more than \d+ nodes \(it stores \d+\)"):
        _load(_chain(files[1], depth))


def test_a_short_chain_loads_and_computes_what_eager_does(files):
    """Depth 6: 2^6 ReLU calls, within the bound; the result is relu applied 64 times (= relu)."""
    loaded = _load(_chain(files[1], 6))
    x = torch.randn(5, 7)   # another batch and width than the trace's (3, 4)
    torch.testing.assert_close(loaded(x), torch.relu(x))


@pytest.mark.parametrize("depth", [17, 40])
def test_a_module_reachable_by_exponentially_many_paths_is_refused(files, depth):
    with pytest.raises(tracejit.LoadError, match="over all its paths"):
        _load(_diamonds(files[0], depth))


def test_few_paths_load_and_walks_over_every_path_stay_bounded(files):
    loaded = _load(_diamonds(files[0], 6))
    names = [n for n, _ in loaded.named_modules(remove_duplicate=False)]
    assert len(names) == 3 + 2 ** 7 - 1   # root, inner, inner.lin, then 2^k paths to s_k, k = 0..6
    assert len(names) <= limits.max_expanded(1)


def test_the_bound_counts_constants_at_every_call(files):
    """A guard whose expected value is a long list, named by many root methods, weighs at every call."""
    def edit(doc):
        guard = next(n for n in graphs(doc)[0]["nodes"] if n["op"] == "tracejit::guard" and n["attrs"]["kind"] == "size")
        guard["attrs"]["expected"] = list(range(20_000))
        _root_methods(doc, [f"m{i}" for i in range(10)])
    with pytest.raises(tracejit.LoadError, match="calls expand"):
        _load(rewrite(files[0], edit_doc=edit))


def test_values_in_counts_iteratively():
    deep = []
    for _ in range(5000):   # deeper than Python's recursion limit
        deep = [deep]
    assert expansion.values_in(deep) == 5001
    assert expansion.values_in({"a": [1, 2, {"b": 3}]}) == 6


@pytest.mark.parametrize("cache", ["first load", "code cache"])
def test_each_graph_compiles_once_and_every_name_keeps_its_own(files, monkeypatch, tmp_path, cache):
    calls = []
    real = compile_once.compile_method
    monkeypatch.setenv("TRACEJIT_CACHE_DIR", str(tmp_path / "cache"))   # empty: the first load compiles
    for where in (compile_once, cached_methods):   # the loader compiles through the code cache's recorder
        monkeypatch.setattr(where, "compile_method", lambda *a, **k: calls.append(a[1]) or real(*a, **k))
    raw = rewrite(files[0], edit_doc=lambda d: _root_methods(d, ["encode", "decode"]))
    loaded = _load(raw)
    assert calls == ["forward"] * 3   # one compilation per graph (root, inner, lin): none for encode, decode
    if cache == "code cache":   # made again from the cache: nothing compiled, every name still its own
        loaded = _load(raw)
        assert calls == ["forward"] * 3
    x = torch.randn(5, 4)                  # another batch than the trace's 3
    want = loaded(x)
    for name in ("encode", "decode"):
        got = getattr(loaded, name)(x)
        torch.testing.assert_close(got["out"], want["out"])
        assert f"def {name}(" in loaded._traced_methods[name].code
        assert loaded._traced_methods[name].signature.startswith(f"{name}(")
        with pytest.raises(TypeError, match=name):      # its input error names it, not forward
            getattr(loaded, name)("not a tensor")
        with pytest.raises(tracejit.GuardError, match=name):   # so does a failed guard (x.size(1) == 4)
            getattr(loaded, name)(torch.randn(5, 6))


@pytest.mark.parametrize("name", ["training", "original_name", "ledger", "graph", "code", "inlined_graph",
                                  "specializations", "state_dict", "inner"])
def test_a_root_method_may_not_shadow_an_attribute(files, name):
    with pytest.raises(tracejit.LoadError, match=f"'{name}' cannot name a traced method"):
        _load(rewrite(files[0], edit_doc=lambda d: _root_methods(d, [name])))


def test_a_submodule_method_may_not_shadow_its_parameter(files):
    with pytest.raises(tracejit.LoadError, match="parameter, buffer or submodule"):
        _load(rewrite(files[0], edit_doc=lambda d: module(d, "inner.lin")["methods"].append(["bias", 2])))


@pytest.mark.parametrize("edit", [dict(extract_version=64), dict(flag_bits=0x800)], ids=["version_6_4", "flags"])
def test_a_zip_the_detector_cannot_read_is_a_load_error(edit, tmp_path):
    raw = _zip(["archive/data.pkl", "archive/code/x.py"], **edit)
    import zipfile
    if edit.get("extract_version"):
        with pytest.raises(NotImplementedError):    # what the detector met before
            zipfile.ZipFile(io.BytesIO(raw)).namelist()
    path = tmp_path / "f.pt"
    path.write_bytes(raw)
    for source in (io.BytesIO(raw), path):
        with pytest.raises(tracejit.LoadError):
            tracejit.load(source)


def test_the_detector_never_raises(monkeypatch):
    from tracejit.migrate import detect

    class Broken:
        def __init__(self, *_):
            raise struct_error("unpack requires a buffer of 4 bytes")
    struct_error = type("error", (Exception,), {})
    monkeypatch.setattr(detect.zipfile, "ZipFile", Broken)
    assert detect.is_torch_file(b"PK\x03\x04" + bytes(60)) is None
