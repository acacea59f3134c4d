"""tracejit.migrate on small modules traced with torch.jit.trace in the test: the migrated program
equals the TorchScript archive on new inputs (other batch sizes / lengths), survives
tracejit.save / load, keeps the module hierarchy, and fails clearly where it cannot convert."""
from __future__ import annotations

import warnings

import pytest
import torch
from torch import nn

import tracejit
from tracejit.pytree import flatten
from tracejit.migrate import MigrationError


def archive(module, example, tmp_path, name="old.pt"):
    """torch.jit.trace ``module`` on ``example`` and save it; returns (path, loaded archive)."""
    path = tmp_path / name
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.jit.save(torch.jit.trace(module, example), str(path))
        return path, torch.jit.load(str(path))


def outputs(fn, *args):
    with torch.no_grad():
        out = fn(*args)
    return out if isinstance(out, tuple) else (out,)


def assert_same(a, b):
    assert len(a) == len(b)
    for x, y in zip(a, b):
        torch.testing.assert_close(x, y, rtol=1e-5, atol=1e-5)


def roundtrip(traced, tmp_path):
    tracejit.save(traced, tmp_path / "new.tjit")
    return tracejit.load(tmp_path / "new.tjit")


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(6, 16), nn.GELU(), nn.Linear(16, 16), nn.Tanh())
        self.head = nn.Linear(16, 3)

    def forward(self, x):
        h = self.body(x)
        return self.head(h).softmax(-1), h.view(x.size(0), 4, -1)[:, 1:3]


class ConvBN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(8, 5)

    def forward(self, x):
        y = self.pool(torch.relu(self.bn(self.conv(x))))
        return self.fc(y.flatten(1))


class LSTMTagger(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(20, 8)
        self.lstm = nn.LSTM(8, 12, num_layers=2, batch_first=True)
        self.out = nn.Linear(12, 4)

    def forward(self, ids):
        seq, (h, c) = self.lstm(self.emb(ids))
        return self.out(seq), h + c


class Structured(nn.Module):
    """Tuple inputs and outputs, a submodule called twice, an in-place op, a tensor constant."""

    def __init__(self):
        super().__init__()
        self.shared = nn.Linear(4, 4)
        self.register_buffer("scale", torch.tensor([1.0, 2.0, 3.0, 4.0]))

    def forward(self, x, pair):
        a, b = pair
        y = self.shared(x) + self.shared(a)
        y.mul_(self.scale)
        return (y, (b * 2, y.sum(-1)))


def fresh(model, seed):
    torch.manual_seed(seed)
    return model().eval()


@pytest.mark.parametrize("make,example,news", [
    (lambda: fresh(MLP, 0), (torch.randn(2, 6),), [(torch.randn(5, 6),), (torch.randn(1, 6),)]),
    (lambda: fresh(ConvBN, 1), (torch.randn(2, 3, 8, 8),), [(torch.randn(4, 3, 8, 8),), (torch.randn(1, 3, 12, 10),)]),
    (lambda: fresh(LSTMTagger, 2), (torch.randint(0, 20, (2, 7)),),
     [(torch.randint(0, 20, (3, 11)),), (torch.randint(0, 20, (1, 4)),)]),
    (lambda: fresh(Structured, 3), (torch.randn(2, 4), (torch.randn(2, 4), torch.randn(3))),
     [(torch.randn(6, 4), (torch.randn(6, 4), torch.randn(5)))]),
], ids=["mlp", "conv_bn", "lstm", "structured"])
def test_migrated_equals_archive_on_new_inputs(make, example, news, tmp_path):
    model = make()
    path, old = archive(model, example, tmp_path)
    migrated = tracejit.migrate(str(path), example)
    reloaded = roundtrip(migrated, tmp_path)
    for args in news:
        want = outputs(old, *args)
        assert_same(outputs(migrated, *args), want)
        assert_same(outputs(reloaded, *args), want)
        assert_same(want, outputs(model, *args))   # the archive itself replays these inputs
    # the new inputs move the outputs (other shapes or values), so the comparisons above can fail
    new_out, example_out = flatten(outputs(old, *news[0]))[0], flatten(outputs(old, *example))[0]
    assert all(a.shape != b.shape or not torch.allclose(a, b) for a, b in zip(new_out, example_out))


def test_hierarchy_parameters_and_buffers_are_kept(tmp_path):
    model = fresh(ConvBN, 4)
    path, _ = archive(model, torch.randn(2, 3, 8, 8), tmp_path)
    migrated = tracejit.migrate(str(path), torch.randn(2, 3, 8, 8))
    assert migrated.original_name == "ConvBN"
    assert [n for n, _ in migrated.named_children()] == ["conv", "bn", "pool", "fc"]
    assert migrated.bn.original_name == "BatchNorm2d"
    assert set(migrated.state_dict()) == set(model.state_dict())
    for k, v in model.state_dict().items():
        assert torch.equal(migrated.state_dict()[k], v), k
    assert "self._modules['conv'].forward(" in migrated.code      # a call into the submodule's own graph
    assert "torch._convolution(x, weight, bias" in migrated.conv.code   # the op torch.jit.trace recorded
    assert "torch.jit" not in migrated.code
    # source lines of the user's code survive
    srcs = {str(n.source.filename) for n in migrated.graph.nodes if n.source is not None}
    assert __file__ in srcs


def test_root_inputs_and_training_flag_are_guarded(tmp_path):
    path, _ = archive(fresh(MLP, 9), torch.randn(2, 6), tmp_path)
    migrated = roundtrip(tracejit.migrate(str(path), torch.randn(2, 6)), tmp_path)
    with pytest.raises(tracejit.GuardError, match=r"input 'x' had 2 dimensions.*value now: 3"):
        migrated(torch.randn(2, 3, 6))
    migrated.train()
    with pytest.raises(tracejit.GuardError, match="traced in eval mode"):
        migrated(torch.randn(2, 6))


def test_gradients_flow_to_migrated_parameters(tmp_path):
    model = fresh(MLP, 5)
    x = torch.randn(3, 6)
    path, old = archive(model, torch.randn(2, 6), tmp_path)
    migrated = roundtrip(tracejit.migrate(str(path), torch.randn(2, 6)), tmp_path)
    old(x)[0].pow(2).sum().backward()
    migrated(x)[0].pow(2).sum().backward()
    for (name, p), (_, q) in zip(old.named_parameters(), migrated.named_parameters()):
        assert q.grad is not None, name
        torch.testing.assert_close(q.grad, p.grad, rtol=1e-5, atol=1e-6)


class Branchy(nn.Module):
    def forward(self, x):
        if x.sum() > 0:
            return x * 2
        return x - 1


class WithScripted(nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = torch.jit.script(Branchy())

    def forward(self, x):
        return self.inner(x) + 1


def test_scripted_control_flow_is_a_clear_error_naming_the_node(tmp_path):
    path, _ = archive(WithScripted(), torch.randn(3), tmp_path)
    with pytest.raises(MigrationError, match=r"prim::If .* at .*test_migrate_modules\.py:\d+.* in module 'inner'.*"
                                             r"control flow"):
        tracejit.migrate(str(path), torch.randn(3))


def test_example_inputs_are_required_and_checked(tmp_path):
    path, _ = archive(fresh(MLP, 6), torch.randn(2, 6), tmp_path)
    with pytest.raises(MigrationError, match="does not record the shapes"):
        tracejit.migrate(str(path))
    with pytest.raises(MigrationError, match=r"aten::linear .*linear\.py:\d+ in module 'body\.0'.*example inputs"):
        tracejit.migrate(str(path), torch.randn(2, 7))
    with pytest.raises(MigrationError, match="takes 1 arguments; 2 example inputs"):
        tracejit.migrate(str(path), (torch.randn(2, 6), torch.randn(2, 6)))


def test_files_that_are_not_torchscript(tmp_path):
    traced = tracejit.trace(lambda x: x + 1, torch.ones(2))
    tracejit.save(traced, tmp_path / "a.tjit")
    with pytest.raises(MigrationError, match="is not a TorchScript archive"):
        tracejit.migrate(str(tmp_path / "a.tjit"), torch.ones(2))
    with pytest.raises(MigrationError, match="no such file"):
        tracejit.migrate(str(tmp_path / "missing.pt"), torch.ones(2))


class TwoMethods(nn.Module):
    def __init__(self):
        super().__init__()
        self.enc = nn.Linear(5, 3)

    def forward(self, x):
        return self.enc(x).relu()

    def encode(self, x, y):
        return self.enc(x) - self.enc(y).sigmoid()


def test_trace_module_archive_with_several_methods(tmp_path):
    model = fresh(TwoMethods, 7)
    path = tmp_path / "two.pt"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.jit.save(torch.jit.trace_module(model, {"forward": torch.randn(2, 5),
                                                      "encode": (torch.randn(2, 5), torch.randn(2, 5))}), str(path))
    migrated = roundtrip(tracejit.migrate(str(path), methods={"forward": torch.randn(2, 5),
                                                              "encode": (torch.randn(2, 5), torch.randn(2, 5))}),
                         tmp_path)
    x, y = torch.randn(4, 5), torch.randn(4, 5)
    assert_same(outputs(migrated, x), outputs(model, x))
    assert_same(outputs(migrated.encode, x, y), outputs(model.encode, x, y))
    with pytest.raises(MigrationError, match="no method 'decode'"):
        tracejit.migrate(str(path), methods={"decode": torch.randn(2, 5)})


class DropoutDict(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(6, 64)
        self.drop = nn.Dropout(0.5)

    def forward(self, x):
        h = self.drop(self.lin(x))
        return {"h": h, "total": h.sum(-1)}


def test_train_mode_dropout_and_dict_output(tmp_path):
    model = fresh(DropoutDict, 8).train()
    path = tmp_path / "drop.pt"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.jit.save(torch.jit.trace(model, torch.randn(2, 6), strict=False, check_trace=False), str(path))
    migrated = roundtrip(tracejit.migrate(str(path), torch.randn(2, 6)), tmp_path)
    assert [e.kind for e in migrated.ledger] == ["nondeterministic"]
    out = migrated(torch.randn(50, 6))
    assert set(out) == {"h", "total"} and out["h"].shape == (50, 64)
    zeros = (out["h"] == 0).float().mean().item()
    assert 0.35 < zeros < 0.65                          # dropout really drops, at p=0.5
    torch.testing.assert_close(out["total"], out["h"].sum(-1))
    migrated.eval()                                     # the trace fixed train mode: a clear error, not a wrong result
    with pytest.raises(tracejit.GuardError, match="traced in train mode"):
        migrated(torch.randn(3, 6))
