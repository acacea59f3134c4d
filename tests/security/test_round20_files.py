"""The round-20 hostile files (catalogue_round20.py) loaded and called in a child process capped at 400 MB of
address space beyond torch's and in CPU time: each is refused at load (LoadError) or its call raises
GuardError before it reads a gigabyte into Python objects; the unedited programs of the same kinds still
compute what eager computes. Also: the static factors that gate convolutions and pooling
(serialize/op_sizes_gates.py) bound their size rules on random shapes, so the gate skips no check that could
fail."""
from __future__ import annotations

import io
import random

import pytest
import torch

import tracejit
from catalogue_round20 import hostile_cases, legit_cases
from security_testlib import round_problems
from tracejit.serialize import op_sizes_gates, size_rules

CPU_S = 2.0


def test_round20_files_are_refused_at_load_or_before_the_read(tmp_path):
    problems = round_problems(tmp_path, hostile_cases(), legit_cases(), CPU_S)
    assert not problems, "\n".join(problems)


def test_the_refusals_say_what_and_where(monkeypatch):
    monkeypatch.setenv("TRACEJIT_CACHE_DIR", "")
    by_name = {n: (raw, spec) for n, raw, spec, _ in hostile_cases()}
    for name, fragment in (("ledger_value_megabyte_string", "ledger entry value: a string of 1000000 characters"),
                           ("ledger_value_nested_40", "nested more than 10 levels"),
                           ("max_pool_stride_0", r"aten::max_pool2d: stride \[0, 0\] must be positive"),
                           ("max_pool_padding_over_half", "padding .* must be between 0 and half the kernel"),
                           ("roll_shifts_dims_mismatch", r"shifts \[1, 2, 3\] and dims \[2, 3\] must align"),
                           ("pixel_shuffle_3_of_4_channels", "must be divisible by upscale_factor"),
                           ("device_xla", "names the device 'xla'.*pass map_location")):
        with pytest.raises(tracejit.LoadError, match=fragment):
            tracejit.load(io.BytesIO(by_name[name][0]))
    loaded = tracejit.load(io.BytesIO(by_name["tolist_of_2_24_zeros"][0]))
    with pytest.raises(tracejit.GuardError, match=r"value at trace time.*a tensor of 16777216 elements .*not read: the guard compares 4 values"):
        loaded(torch.randn(3, 4))


def test_map_location_loads_a_program_naming_a_missing_device(monkeypatch):
    monkeypatch.setenv("TRACEJIT_CACHE_DIR", "")
    raw = dict((n, r) for n, r, _, _ in hostile_cases())["device_hpu"]
    loaded = tracejit.load(io.BytesIO(raw), map_location="meta")   # inspect's load
    assert loaded is not None


def test_a_long_ledger_value_saves_cut_and_loads():
    """save keeps at most the 4,096 characters the loader takes of a ledger string (before: a file save wrote
    and load took any length)."""
    from tracejit.serialize import archive, limits
    cut = archive._jsonable("x" * 10_000)
    assert len(cut) == limits.MAX_STRING and cut.endswith("...")
    assert limits.ledger_value(archive._jsonable([[object()] * 2] * 3), "v") is not None
    deep = archive._jsonable(eval("[" * 30 + "1" + "]" * 30))   # noqa: S307 (a literal)
    limits.ledger_value(deep, "v")


@pytest.mark.parametrize("seed", range(3))
def test_convolution_and_pool_factors_bound_their_rules(seed):
    """N x factor bounds the rule on every non-empty input of matching channels (random shapes and constants):
    an input under the gate's N cannot pass the budget the full check holds it to."""
    rng = random.Random(seed)
    for _ in range(300):
        d = rng.choice((1, 2, 3))
        groups = rng.choice((1, 2))
        cin, cout = groups * rng.randint(1, 3), groups * rng.randint(1, 4)
        k = [rng.randint(1, 4) for _ in range(d)]
        b = {"input": torch.empty([rng.randint(1, 3), cin, *[rng.randint(1, 9) for _ in range(d)]], device="meta"),
             "weight": torch.empty([cout, cin // groups, *k], device="meta"),
             "stride": [rng.randint(1, 3) for _ in range(d)], "padding": [rng.randint(0, 3) for _ in range(d)],
             "dilation": [rng.randint(1, 3) for _ in range(d)], "groups": groups}
        name, per, _ = op_sizes_gates.convolution_factor(b, {"weight"})
        rule = size_rules.rule(f"conv{d}d")
        assert rule.elements(b) <= b[name].numel() * per, b
        pool = size_rules.rule(f"max_pool{d}d")
        kp = [rng.randint(1, 4) for _ in range(d)]
        p = {"self": b["input"], "kernel_size": kp, "stride": rng.choice(([], [rng.randint(1, 3)] * d)),
             "padding": [rng.randint(0, kk // 2) for kk in kp], "dilation": [rng.randint(1, 2)] * d,
             "ceil_mode": rng.choice((False, True))}
        name, per, work = op_sizes_gates.pool_factor(p, set(), d)
        try:
            pool.elements(p)
        except ValueError:   # a kernel over the input: refused before any check could pass (op_sizes_constants)
            continue
        assert pool.elements(p) <= p[name].numel() * per and pool.flops(p) <= p[name].numel() * work, p


def test_a_traced_stride_or_computed_weight_keeps_the_full_check():
    b = {"input": torch.empty(1, 2, 5, 5, device="meta"), "weight": torch.empty(3, 2, 3, 3, device="meta"),
         "stride": [1, 1], "padding": [1, 1], "dilation": [1, 1], "groups": 1}
    assert op_sizes_gates.convolution_factor(b, set()) is None   # the weight is not the file's
    assert op_sizes_gates.convolution_factor({**b, "transposed": True}, {"weight"}) is None
    assert op_sizes_gates.convolution_factor({**b, "padding": "same"}, {"weight"}) is None
    assert op_sizes_gates.convolution_factor({**b, "stride": [object(), 1]}, {"weight"}) is None
