"""The round-19 hostile files (catalogue_round19.py) loaded and called in a child process capped at 400 MB of
address space beyond torch's and in CPU time: each is refused at load (LoadError) or its call raises
BudgetError / GuardError before the op runs; none kills the child (SIGFPE before the fix), none runs past
the CPU cap (matrix_power, binomial), none allocates its gigabyte; and the unedited programs of the same
kinds still compute what eager computes."""
from __future__ import annotations

import io

import pytest
import torch

import tracejit
from catalogue_round19 import hostile_cases, legit_cases
from security_testlib import round_problems
from tracejit.serialize import size_rules

CPU_S = 2.0


def test_round19_files_are_refused_before_they_crash_hang_or_allocate(tmp_path):
    problems = round_problems(tmp_path, hostile_cases(), legit_cases(), CPU_S)
    assert not problems, "\n".join(problems)


def test_the_refusals_say_what_and_where():
    by_name = {n: (raw, spec) for n, raw, spec, _ in hostile_cases()}
    for name, fragment in (("pieces_tensor_split_2_21", "it would make 2097152 tensors, and the program unpacks 2"),
                           ("matrix_power_int64_min", "cannot be negated in 64 bits"),
                           ("extent_view_sum", "aten::view at the traced sizes would allocate 268435456 elements"),
                           ("device_opengl", "the device 'opengl' is not one a file may name")):
        with pytest.raises(tracejit.LoadError, match=fragment):
            tracejit.load(io.BytesIO(by_name[name][0]))


def test_every_split_that_returns_a_list_has_a_pieces_rule():
    """Default-deny: an allowed op returning a list of tensors whose length an argument or a size sets is
    checked against the pieces its node unpacks (the others return one tensor per tensor they are given)."""
    from tracejit.ops import schemas_of
    from tracejit.serialize import op_allowlist
    by_inputs = {"broadcast_tensors", "meshgrid", "atleast_1d", "atleast_2d", "atleast_3d", "where"}
    lists = {name for name in op_allowlist.ALLOWED for _, s in schemas_of(f"aten::{name}")
             if len(s.returns) == 1 and str(s.returns[0].type).startswith("List[Tensor]")}
    assert lists - by_inputs <= set(size_rules.PIECES), sorted(lists - by_inputs - set(size_rules.PIECES))


def test_empty_tensors_count_at_their_extent():
    from tracejit.support.call_budget import over_budget
    rule = size_rules.SEVERAL_TENSORS   # mv of an empty [2^28, 0] matrix by an empty vector: 2^28 zeros
    assert over_budget(rule, {"self": torch.empty(2 ** 28, 0), "vec": torch.empty(0)}, 2 ** 25, 1) is not None
    assert over_budget(rule, {"self": torch.empty(2 ** 10, 0), "vec": torch.empty(0)}, 2 ** 25, 1) is None
