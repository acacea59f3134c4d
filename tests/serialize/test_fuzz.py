"""Fuzzing tracejit.load with mutations of valid saved files (hypothesis).

Truncations, byte flips, insertions, and edits of random fields of the program document (a value
replaced by another type / number / string, a key deleted, a list element duplicated / swapped),
with the CRC recomputed for half of the document edits so they reach the validation layer.

Every mutated file must either
- fail to load with tracejit.LoadError (never another exception type, never a hang), or
- load; then, if the file is one tracejit could have written for the original (unchanged, or
  changed without fixing the CRC, which must never load), it computes exactly what the original
  does on a fixed input. A CRC-fixed edit is a valid file describing another program: it may
  compute something else (``* 3`` edited to ``* 4``), and calling it may raise an ordinary
  Exception, but loading it may not raise anything but LoadError.

A LoadError from load's last-resort net (an internal error on a malformed file, turned into a
LoadError whose message cannot say what is wrong) counts as a failure too: it means no check
recognised the file. What these fuzzers found has minimal repros in test_bad_files.py.
"""
import contextlib
import copy
import io
import json
import os
import signal

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tracejit
from serialize_testlib import LAST_RESORT, assemble, doc_text, parse, raw_file, split



def fuzz(n: int):
    """n examples, deterministic (the suite stays fast and repeatable); for a longer random hunt:
    ``TRACEJIT_FUZZ_EXAMPLES=3000 TRACEJIT_FUZZ_RANDOM=1 pytest tests/serialize/test_fuzz.py``"""
    return settings(max_examples=int(os.environ.get("TRACEJIT_FUZZ_EXAMPLES", n)), deadline=None,
                    derandomize=not os.environ.get("TRACEJIT_FUZZ_RANDOM"), database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


HANG_SECONDS = 20
# a position in a sequence: an index modulo its length (hypothesis spreads large integers well)
POSITION = st.integers(0, 2 ** 31)

@contextlib.contextmanager
def no_hang(seconds=HANG_SECONDS):
    def on_alarm(*_):
        raise TimeoutError(f"tracejit.load did not return within {seconds} s")
    old = signal.signal(signal.SIGALRM, on_alarm)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


# ---------------------------------------------------------------------------------------------
# targets: a module with submodules and buffers, and a function with a captured constant
# ---------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def targets(small_net, small_fn):
    net, traced_net, raw_net = small_net
    traced_fn, raw_fn = small_fn
    g = torch.Generator().manual_seed(7)
    x_net = (torch.randn(3, 2, 5, 5, generator=g),)
    x_fn = (torch.randn(4, generator=g), torch.randn(4, generator=g))
    with torch.no_grad():
        return {"net": (raw_net, x_net, net(*x_net)), "fn": (raw_fn, x_fn, traced_fn(*x_fn))}


def check(raw: bytes, original: bytes, inputs, expected, crc_fixed: bool, **load_kw):
    """Load a mutated file; see the module docstring for what must hold. Returns what happened."""
    try:
        with no_hang():
            loaded = tracejit.load(io.BytesIO(raw), **load_kw)
    except tracejit.LoadError as e:
        assert str(e), "a LoadError must say what is wrong"
        assert not str(e).startswith(LAST_RESORT), f"no check recognised this file; the last-resort net did: {e}"
        return "rejected"
    assert isinstance(loaded, (tracejit.TracedFunction, tracejit.TracedModule))
    if raw == original or not crc_fixed:
        with torch.no_grad():
            out = loaded(*inputs)
        torch.testing.assert_close(out, expected, rtol=0, atol=0)
        return "same"
    try:
        with no_hang(), torch.no_grad():
            loaded(*inputs)
    except TimeoutError:
        raise
    except Exception:
        pass
    return "other program"


# ---------------------------------------------------------------------------------------------
# byte-level mutations (the CRC is not fixed: nothing but the original may load)
# ---------------------------------------------------------------------------------------------

@fuzz(100)
@given(which=st.sampled_from(["net", "fn"]), cut=POSITION)
def test_truncations(targets, which, cut):
    raw, inputs, expected = targets[which]
    n = cut % len(raw)
    assert check(raw[:n], raw, inputs, expected, crc_fixed=False) == "rejected"


@fuzz(150)
@given(which=st.sampled_from(["net", "fn"]),
       flips=st.lists(st.tuples(POSITION, st.integers(1, 255)), min_size=1, max_size=4, unique_by=lambda f: f[0]))
def test_byte_flips(targets, which, flips):
    raw, inputs, expected = targets[which]
    bad = bytearray(raw)
    for where, mask in flips:
        bad[where % len(raw)] ^= mask
    result = check(bytes(bad), raw, inputs, expected, crc_fixed=False)
    assert result == "rejected" or bytes(bad) == raw


@fuzz(100)
@given(which=st.sampled_from(["net", "fn"]), where=POSITION, junk=st.binary(min_size=1, max_size=64))
def test_insertions_and_overwrites(targets, which, where, junk):
    raw, inputs, expected = targets[which]
    at = where % len(raw)
    for bad in (raw[:at] + junk + raw[at:], raw[:at] + junk + raw[at + len(junk):]):
        result = check(bad, raw, inputs, expected, crc_fixed=False)
        assert result == "rejected" or bad == raw


# ---------------------------------------------------------------------------------------------
# document edits
# ---------------------------------------------------------------------------------------------

def slots(node, out, path=()):
    """Every (container, key, path) in a JSON document, depth first."""
    if isinstance(node, dict):
        for k in node:
            out.append((node, k, path + (k,)))
            slots(node[k], out, path + (k,))
    elif isinstance(node, list):
        for i in range(len(node)):
            out.append((node, i, path + (i,)))
            slots(node[i], out, path + (i,))
    return out


VALUES = st.one_of(
    st.none(), st.booleans(),
    st.integers(-3, 40), st.sampled_from([-2 ** 63, 2 ** 63, 2 ** 64 + 1, 10 ** 30]),
    st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from(["", "x", "forward", "weight", "conv", "aten::relu.default", "aten::add.Tensor",
                     "fn:torch.relu", "method:relu", "tracejit::get_attr", "tracejit::call_module", "float32",
                     "cpu", "meta", "leaf", "tuple", "dict", "namedtuple", "parameter", "buffer", "__class__",
                     "a.b", "..", "fn:os.system", "1e400"]),
    st.text(max_size=12),
    st.sampled_from([[], {}, [1, 2], {"v": 0}, {"v": 1}, {"v": 10 ** 6}, {"tuple": []}, {"float": "inf"},
                     {"dtype": "float64"}, {"kind": "leaf"}, [[]], [None, None]]),
)


@st.composite
def doc_edits(draw):
    kind = draw(st.sampled_from(["replace", "replace", "replace", "delete", "duplicate", "swap"]))
    return kind, draw(POSITION), draw(VALUES), draw(POSITION)



def apply_edit(doc, edit):
    kind, where, value, other = edit
    candidates = slots(doc["program"], [])
    if kind in ("duplicate", "swap"):
        candidates = [c for c in candidates if isinstance(c[0], list)]
    container, key, path = candidates[where % len(candidates)]
    if kind == "replace":
        container[key] = copy.deepcopy(value)
    elif kind == "delete":
        del container[key]
    elif kind == "duplicate":
        container.insert(key, copy.deepcopy(container[key]))
    else:
        j = other % len(container)
        container[key], container[j] = container[j], container[key]
    return path


def test_document_edits(targets):
    @fuzz(300)
    @given(which=st.sampled_from(["net", "fn"]), edits=st.lists(doc_edits(), min_size=1, max_size=3),
           fix_crc=st.booleans())
    def run(which, edits, fix_crc):
        raw, inputs, expected = targets[which]
        doc, tensors = parse(raw)
        doc = copy.deepcopy(doc)
        for edit in edits:
            apply_edit(doc, edit)
        if fix_crc:
            bad = assemble(doc, tensors)
        else:
            from safetensors.torch import save as st_save
            text = json.dumps(doc, sort_keys=True, separators=(",", ":"))   # the stale crc stays in
            bad = st_save(tensors, metadata={"tracejit": text})
        check(bad, raw, inputs, expected, crc_fixed=fix_crc)
    run()


def test_document_edits_without_integrity_check(targets):
    """With check_integrity=False every edit reaches validation: still only LoadError or a program."""
    @fuzz(300)
    @given(which=st.sampled_from(["net", "fn"]), edit=doc_edits())
    def run(which, edit):
        raw, inputs, expected = targets[which]
        doc, tensors = parse(raw)
        doc = copy.deepcopy(doc)
        apply_edit(doc, edit)
        check(assemble(doc, tensors), raw, inputs, expected, crc_fixed=True, check_integrity=False)
    run()


def test_safetensors_header_edits(targets):
    """Edits of the tensor entries (dtype, shape, data_offsets, names), the CRC fixed."""
    @fuzz(200)
    @given(which=st.sampled_from(["net", "fn"]), edit=doc_edits(), rename=st.booleans())
    def run(which, edit, rename):
        raw, inputs, expected = targets[which]
        header, data = split(raw)
        meta = header.pop("__metadata__")
        names = sorted(header)
        if rename:   # a tensor under another (or a clashing) name
            old = names[edit[1] % len(names)]
            header[str(edit[2])] = header.pop(old)
        else:
            apply_edit({"program": header}, edit)
        header["__metadata__"] = meta
        check(raw_file(header, data), raw, inputs, expected, crc_fixed=True)
    run()


def test_the_fuzzers_reach_validation(targets):
    """The edits are not all stopped by the checksum: a crc-fixed neutral edit loads and computes
    the same, a crc-fixed invalid one is rejected by validation (not by the checksum)."""
    raw, inputs, expected = targets["fn"]
    doc, tensors = parse(raw)
    doc["program"]["ledger"] = []
    loaded = tracejit.load(io.BytesIO(assemble(doc, tensors)))
    assert loaded.ledger == ()
    torch.testing.assert_close(loaded(*inputs), expected, rtol=0, atol=0)
    text = doc_text(parse(raw)[0]).replace('"aten::mul.', '"aten::definitely_not_an_op.', 1)
    with pytest.raises(tracejit.LoadError, match="definitely_not_an_op"):
        tracejit.load(io.BytesIO(assemble(text, tensors)))
