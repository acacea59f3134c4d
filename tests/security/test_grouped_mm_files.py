"""``aten::_grouped_mm`` in files (transformers' mixture of experts: Mixtral, Qwen2-MoE). torch's CPU kernel
checks ranks, dtypes and the length of ``offs`` but not its values: offsets past the rows read outside the
operand, and rows no group covers come back as uninitialised memory (the process's old heap contents). So
its size rule (serialize/op_sizes_grouped.py) checks ``offs`` before every call of a loaded program and the
operands' sizes, at load on the traced shapes and at each call on the real ones. Hostile rows: real saves of a
small expert layer, edited (CRC recomputed), loaded and called in a capped child: a GuardError before the
kernel runs, never a crash; the unedited file computes what eager computes on new numbers of tokens."""
from __future__ import annotations

import io

import pytest
import torch
from torch import nn

import tracejit
from security_testlib import both, graphs, rewrite, run_child


class Experts(nn.Module):
    """Each token to one of 3 experts, as transformers' grouped-mm MoE does: sort by expert, count, cumsum,
    one grouped product (``shift`` / ``scale``: 0 and 1, what the hostile rows edit)."""

    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(3, 8, 16) / 3)

    def forward(self, x):
        ids = (x[:, 0].abs() * 2).long().clamp(max=2)
        ids, perm = torch.sort(ids)
        counts = torch.histc(ids.float(), bins=3, min=0, max=2)
        offs = torch.cumsum(counts, 0, dtype=torch.int32) * 1 - 0
        return torch._grouped_mm(x[:, :8][perm], self.w, offs=offs)


def _saved() -> bytes:
    torch.manual_seed(0)
    traced = tracejit.trace(Experts().eval(), torch.randn(6, 8))
    buf = io.BytesIO()
    tracejit.save(traced, buf)
    return buf.getvalue()


def _edit(op, index, value, which=0):
    """Set argument ``index`` (an int: positional; a str: keyword) of the ``which``-th node of ``op``."""
    def edit(doc):
        node = [n for g in graphs(doc) for n in g["nodes"] if n["op"].startswith(op)][which]
        if isinstance(index, int):
            node["args"][index] = value
        else:
            node["kwargs"] = [[k, value if k == index else v] for k, v in node["kwargs"]]
    return edit


_both = both


HOSTILE = {   # name -> (edit of the document, input spec)
    "offs_past_the_rows": (_edit("aten::mul", 1, 100000, which=1), "1:6,8"),   # reads past x (before: silently)
    "offs_negative": (_edit("aten::sub", 1, 50), "1:6,8"),                       # starts before x
    "offs_short_of_the_rows": (_edit("aten::histc", "max", 1), "1:6,8"),        # rows left as uninitialised memory
    "offs_decreasing": (_both(_edit("aten::mul", 1, -1, which=1), _edit("aten::sub", 1, -6)), "1:6,8"),
    "contraction_mismatch": (_edit("aten::slice", 3, 4), "1:6,8"),              # x[:, :4] x [3, 8, 16]
}


def test_the_unedited_expert_file_answers_eager_on_new_token_counts():
    torch.manual_seed(0)
    model = Experts().eval()
    loaded = tracejit.load(io.BytesIO(_saved()))
    model.load_state_dict(dict(loaded.state_dict()))
    for n in (6, 11, 1, 40):
        x = torch.randn(n, 8)
        assert torch.equal(loaded(x), model(x))


def test_hostile_offsets_and_shapes_are_refused_before_the_kernel(tmp_path):
    raw = _saved()
    cases = [{"name": n, "raw": rewrite(raw, edit_doc=e), "inputs": spec} for n, (e, spec) in HOSTILE.items()]
    report = run_child(tmp_path, cases, str(tmp_path / "canary"), mem_mb=400, cpu_s=60)
    problems = [f"{n}: {r}" for n, r in report.items()
                if r["outcome"] != "loaded" or r.get("call") != "raised GuardError"]
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("name, fragment", [("offs_past_the_rows", "must end at the ragged size"),
                                            ("offs_negative", "non-decreasing from 0"),
                                            ("offs_decreasing", "non-decreasing from 0"),
                                            ("offs_short_of_the_rows", "must end at the ragged size"),
                                            ("contraction_mismatch", "do not share their contraction size")])
def test_the_refusal_names_the_op_the_line_and_the_offsets(name, fragment):
    edit, _ = HOSTILE[name]
    loaded = tracejit.load(io.BytesIO(rewrite(_saved(), edit_doc=edit)))
    with pytest.raises(tracejit.GuardError, match=fragment) as info:
        loaded(torch.randn(6, 8))
    assert "aten::_grouped_mm at " in str(info.value) and "test_grouped_mm_files.py" in str(info.value)
