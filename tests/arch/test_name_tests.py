"""The load path's name checks are string tests (tracejit/patterns.py: no pattern to compile at a server's start);
each must accept exactly what the regular expression it replaced accepts (fullmatch), on names a file could
hold: ASCII words, dots, colons, digits first, keywords, non-ASCII letters and digits, control characters,
lengths around each limit."""
from __future__ import annotations

import re

import pytest
from hypothesis import example, given, settings, strategies as st

from tracejit.ir.guard_nodes import is_flag_path
from tracejit.patterns import ascii_identifier, ascii_word, split_op_name
from tracejit.serialize.structure import _ascii_name

_ALPHABET = st.sampled_from(list("aZ_09.:") + ["é", "ǅ", "٣", "\n", " ", "-", "ſ", "K"])   # K: Kelvin sign
_NAMES = st.one_of(st.text(_ALPHABET, max_size=12), st.text(st.sampled_from("ab_1"), min_size=95, max_size=205))

IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,199}")
WORD = re.compile(r"[A-Za-z0-9_]+")
NAMEDTUPLE_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_]{0,99}")
# module names: ASCII words and "-" (torchvision's RegNet: "block4-8")
FLAG_PATH = re.compile(r"[A-Za-z0-9_-]{1,200}(\.[A-Za-z0-9_-]{1,200}){0,63}")
OP_NAME = re.compile(r"([a-z_]+)::([A-Za-z_][A-Za-z0-9_]*)(?:\.([A-Za-z_][A-Za-z0-9_]*))?")


@settings(max_examples=120, deadline=None)
@given(_NAMES)
@example("if")
@example("a" * 200)
@example("a" * 201)
@example("_" + "1" * 99)
@example("A" * 100)
@example("A" * 101)
def test_identifier_word_and_namedtuple_name_accept_what_their_patterns_accept(text):
    assert ascii_identifier(text, 200) == bool(IDENT.fullmatch(text))
    assert ascii_word(text) == bool(WORD.fullmatch(text))
    assert _ascii_name(text) == bool(NAMEDTUPLE_NAME.fullmatch(text))


@settings(max_examples=120, deadline=None)
@given(st.one_of(_NAMES, st.lists(st.text(st.sampled_from("a1_é"), max_size=3), max_size=66).map(".".join)))
@example("a." * 63 + "b")
@example("a." * 64 + "b")
@example("a" * 200 + ".b")
@example("a" * 201)
@example("0.1")
@example("trunk_output.block4-8.f")
@example("a'b.c\\d")
@example("-.--")
def test_a_flag_path_is_what_the_path_pattern_accepts(path):
    assert is_flag_path(path) == bool(FLAG_PATH.fullmatch(path))


@settings(max_examples=120, deadline=None)
@given(st.tuples(st.text(st.sampled_from("a_Z1é"), max_size=4), st.sampled_from(["::", ":", "", "::x::"]),
                 _NAMES).map("".join))
@example("aten::add.Tensor")
@example("aten::add")
@example("aten::add.")
@example("aten::add.Tensor.x")
@example("_::_._")
@example("aten::1add")
@example("Aten::add")
@example("aten::add\n")
def test_an_op_name_splits_as_the_op_name_pattern_matched(op):
    m = OP_NAME.fullmatch(op)
    assert split_op_name(op) == (m.groups() if m else None)


@pytest.mark.parametrize("value", [None, 3, b"aten::add", ["aten::add"]])
def test_a_name_that_is_not_a_string_is_refused(value):
    assert not ascii_identifier(value) and not ascii_word(value) and not is_flag_path(value)
    assert split_op_name(value) is None and not _ascii_name(value)
