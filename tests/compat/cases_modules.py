"""Differential cases: nn.Modules (torch.nn layers as the docs and tutorials use them, torchvision /
transformers modeling patterns, module features users hit in torch.jit.trace issues)."""
import math

import torch
import torch.nn.functional as F
from torch import nn

from harness import Case, Inputs

_in = Inputs(4321)
R, I = _in.R, _in.I


def M(name, factory, example, new, **kw):
    return Case(name, factory, example, new, module=True, **kw)


def ev(factory):
    """A factory of the module in eval mode."""
    return lambda: factory().eval()


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(4, 8), nn.Linear(8, 3)

    def forward(self, x):
        return self.fc2(F.relu(self.fc1(x)))


class BasicBlock(nn.Module):
    """torchvision.models.resnet.BasicBlock."""

    def __init__(self, c=4):
        super().__init__()
        self.conv1 = nn.Conv2d(c, c, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(c)
        self.conv2 = nn.Conv2d(c, c, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(c)

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        return F.relu(self.bn2(self.conv2(out)) + x)


class SelfAttention(nn.Module):
    """BERT-style self-attention with an additive mask."""

    def __init__(self, d=8, heads=2):
        super().__init__()
        self.heads, self.dh = heads, d // heads
        self.q, self.k, self.v, self.o = (nn.Linear(d, d) for _ in range(4))

    def shape(self, x):
        b, t, _ = x.size()
        return x.view(b, t, self.heads, self.dh).transpose(1, 2)

    def forward(self, x, mask):
        q, k, v = self.shape(self.q(x)), self.shape(self.k(x)), self.shape(self.v(x))
        scores = q @ k.transpose(-1, -2) / math.sqrt(self.dh)
        scores = scores + (1.0 - mask[:, None, None, :].to(scores.dtype)) * -10000.0
        ctx = scores.softmax(-1) @ v
        b, h, t, d = ctx.shape
        return self.o(ctx.transpose(1, 2).reshape(b, t, h * d))


class Embedder(nn.Module):
    """Token + position embeddings (transformers Embeddings)."""

    def __init__(self):
        super().__init__()
        self.tok, self.pos = nn.Embedding(20, 6), nn.Embedding(16, 6)
        self.norm = nn.LayerNorm(6)

    def forward(self, ids):
        pos = torch.arange(ids.size(1), device=ids.device).unsqueeze(0)
        return self.norm(self.tok(ids) + self.pos(pos))


class TwoHeads(nn.Module):
    def __init__(self):
        super().__init__()
        self.body, self.cls, self.reg = nn.Linear(4, 6), nn.Linear(6, 3), nn.Linear(6, 2)

    def forward(self, x):
        h = torch.tanh(self.body(x))
        return self.cls(h), self.reg(h)


class SharedTwice(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        return self.lin(self.lin(x).relu())


class ModuleListLoop(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(4, 4) for _ in range(3))

    def forward(self, x):
        for layer in self.layers:
            x = x + layer(x).relu()
        return x


class ModuleDictRoute(nn.Module):
    def __init__(self):
        super().__init__()
        self.heads = nn.ModuleDict({"a": nn.Linear(4, 2), "b": nn.Linear(4, 2)})

    def forward(self, x):
        return self.heads["a"](x) - self.heads["b"](x)


class DirectParam(nn.Module):
    def __init__(self):
        super().__init__()
        self.scale = nn.Parameter(torch.randn(4))
        self.register_buffer("shift", torch.randn(4))

    def forward(self, x):
        return x * self.scale + self.shift


class Counter(nn.Module):
    """A buffer updated in place by forward (num_batches_tracked-like)."""

    def __init__(self):
        super().__init__()
        self.register_buffer("count", torch.zeros(1))
        self.register_buffer("total", torch.zeros(4))

    def forward(self, x):
        self.count += 1
        self.total.add_(x.sum(0))
        return x - self.total / self.count


class KwargForward(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x, scale=2.0, bias=None):
        y = self.lin(x) * scale
        return y if bias is None else y + bias


class TupleIn(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x, y):
        return x + self.lin(y[0]) * y[1]


class DictIn(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 2)

    def forward(self, batch):
        return self.lin(batch["x"]) * batch["w"]


class NoneSub(nn.Module):
    def __init__(self):
        super().__init__()
        self.submod = nn.Linear(3, 4)
        self.submod = None
        self.lin = nn.Linear(3, 3)

    def forward(self, x):
        return self.lin(x) if self.submod is None else self.submod(x)


class OwnParamAsInput(nn.Module):
    def __init__(self):
        super().__init__()
        self.x = nn.Parameter(torch.randn(3, 4))

    def forward(self, y):
        return self.x + y


class LSTMTagger(nn.Module):
    """torch tutorial: sequence models (LSTM part-of-speech tagger)."""

    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(10, 6)
        self.lstm = nn.LSTM(6, 5, batch_first=True)
        self.out = nn.Linear(5, 3)

    def forward(self, ids):
        h, _ = self.lstm(self.emb(ids))
        return F.log_softmax(self.out(h), dim=-1)


class GRUEncoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.gru = nn.GRU(4, 3, num_layers=2, batch_first=True)

    def forward(self, x):
        out, h = self.gru(x)
        return out, h


class SEBlock(nn.Module):
    """Squeeze-and-excitation (torchvision.ops.SqueezeExcitation)."""

    def __init__(self, c=4):
        super().__init__()
        self.fc1, self.fc2 = nn.Conv2d(c, 2, 1), nn.Conv2d(2, c, 1)

    def forward(self, x):
        s = F.adaptive_avg_pool2d(x, 1)
        return x * torch.sigmoid(self.fc2(F.relu(self.fc1(s))))


class PatchEmbed(nn.Module):
    """ViT patch embedding: conv, flatten(2), transpose, class token."""

    def __init__(self):
        super().__init__()
        self.proj = nn.Conv2d(3, 8, 2, stride=2)
        self.cls = nn.Parameter(torch.randn(1, 1, 8))

    def forward(self, x):
        x = self.proj(x).flatten(2).transpose(1, 2)
        return torch.cat([self.cls.expand(x.shape[0], -1, -1), x], dim=1)


class UNetUp(nn.Module):
    def __init__(self):
        super().__init__()
        self.up = nn.ConvTranspose2d(4, 2, 2, stride=2)
        self.conv = nn.Conv2d(4, 2, 3, padding=1)

    def forward(self, x, skip):
        return self.conv(torch.cat([self.up(x), skip], dim=1))


class Hooked(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.lin.register_forward_hook(lambda m, i, o: o * 2)
        self.lin.register_forward_pre_hook(lambda m, i: (i[0] + 1,))

    def forward(self, x):
        return self.lin(x)


class TrainDropout(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.drop = nn.Dropout(0.0)

    def forward(self, x):
        return self.drop(self.lin(x))


class ClassifierHead(nn.Module):
    """torchvision-style features -> avgpool -> flatten -> classifier."""

    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2))
        self.avgpool = nn.AdaptiveAvgPool2d((2, 2))
        self.classifier = nn.Sequential(nn.Flatten(), nn.Linear(16, 5))

    def forward(self, x):
        return self.classifier(self.avgpool(self.features(x)))


class GPTBlock(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(8), nn.LayerNorm(8)
        self.attn = nn.MultiheadAttention(8, 2, batch_first=True)
        self.mlp = nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.Linear(16, 8))

    def forward(self, x):
        h = self.ln1(x)
        t = x.size(1)
        mask = torch.triu(torch.ones(t, t, dtype=torch.bool), 1)
        x = x + self.attn(h, h, h, attn_mask=mask, need_weights=False)[0]
        return x + self.mlp(self.ln2(x))


def seq(layers):
    return lambda: nn.Sequential(*layers())


CASES = [
    M("linear", lambda: nn.Linear(4, 3), (R(2, 4),), [(R(5, 4),), (R(1, 4),)], grad=True, source="torch docs"),
    M("linear_3d_input", lambda: nn.Linear(4, 3), (R(2, 3, 4),), [(R(1, 5, 4),), (R(3, 1, 4),)], grad=True),
    M("bilinear", lambda: nn.Bilinear(3, 4, 2), (R(2, 3), R(2, 4)), [(R(5, 3), R(5, 4)), (R(1, 3), R(1, 4))]),
    M("mlp", MLP, (R(2, 4),), [(R(6, 4),), (R(1, 4),)], grad=True, source="torch tutorial: build the network"),
    M("conv2d", lambda: nn.Conv2d(2, 3, 3, padding=1), (R(1, 2, 5, 5),), [(R(2, 2, 7, 4),), (R(3, 2, 3, 3),)],
      grad=True),
    M("conv1d_stride", lambda: nn.Conv1d(3, 4, 3, stride=2), (R(2, 3, 9),), [(R(1, 3, 12),), (R(4, 3, 5),)]),
    M("conv3d", lambda: nn.Conv3d(1, 2, 2), (R(1, 1, 3, 3, 3),), [(R(2, 1, 4, 3, 5),), (R(1, 1, 2, 2, 2),)]),
    M("conv_transpose2d", lambda: nn.ConvTranspose2d(2, 3, 2, stride=2), (R(1, 2, 3, 3),),
      [(R(2, 2, 4, 5),), (R(1, 2, 1, 1),)]),
    M("batchnorm_eval", ev(lambda: nn.BatchNorm2d(3)), (R(2, 3, 4, 4),), [(R(4, 3, 2, 5),), (R(1, 3, 3, 3),)]),
    M("batchnorm_train_updates_stats", lambda: nn.BatchNorm1d(4), (R(5, 4),), [(R(6, 4),), (R(3, 4),)],
      source="running stats updated in place by the traced program", deliberate="checker-restores-state"),
    M("layernorm", lambda: nn.LayerNorm(6), (R(2, 6),), [(R(5, 6),), (R(7, 6),)], grad=True),
    M("groupnorm", lambda: nn.GroupNorm(2, 4), (R(2, 4, 3, 3),), [(R(1, 4, 5, 2),), (R(3, 4, 1, 1),)]),
    M("instancenorm", lambda: nn.InstanceNorm2d(3), (R(2, 3, 4, 4),), [(R(1, 3, 6, 5),), (R(3, 3, 3, 3),)]),
    M("embedding", lambda: nn.Embedding(10, 4), (I(10, 2, 3),), [(I(10, 4, 5),), (I(10, 1, 1),)]),
    M("embedding_bag_mean", lambda: nn.EmbeddingBag(10, 3, mode="mean"), (I(10, 2, 4),),
      [(I(10, 3, 4),), (I(10, 1, 4),)]),
    M("maxpool_avgpool", seq(lambda: [nn.MaxPool2d(2), nn.AvgPool2d(2)]), (R(1, 2, 8, 8),),
      [(R(2, 2, 4, 12),), (R(1, 2, 16, 4),)]),
    M("adaptive_pool_flatten", seq(lambda: [nn.AdaptiveAvgPool2d(1), nn.Flatten()]), (R(2, 3, 4, 4),),
      [(R(1, 3, 7, 2),), (R(5, 3, 1, 1),)]),
    M("upsample_nearest", lambda: nn.Upsample(scale_factor=2, mode="nearest"), (R(1, 2, 3, 3),),
      [(R(2, 2, 4, 5),), (R(1, 2, 1, 2),)]),
    M("upsample_bilinear", lambda: nn.Upsample(scale_factor=2, mode="bilinear", align_corners=False),
      (R(1, 2, 3, 3),), [(R(2, 2, 4, 5),), (R(1, 2, 1, 2),)]),
    M("pixel_shuffle", lambda: nn.PixelShuffle(2), (R(1, 8, 2, 2),), [(R(2, 8, 3, 4),), (R(1, 8, 1, 1),)]),
    M("dropout_eval", ev(lambda: nn.Dropout(0.5)), (R(3, 4),), [(R(5, 4),), (R(1, 2),)]),
    M("dropout_p0_train", TrainDropout, (R(3, 4),), [(R(5, 4),), (R(1, 4),)], deliberate="warns-nondeterministic"),
    M("activations_seq", seq(lambda: [nn.ReLU(), nn.Hardswish(), nn.ELU(), nn.Softmax(-1)]), (R(3, 4),),
      [(R(5, 4),), (R(1, 7),)]),
    M("prelu", lambda: nn.PReLU(), (R(3, 4),), [(R(5, 4),), (R(2, 1),)], grad=True),
    M("identity", lambda: nn.Identity(), (R(3, 4),), [(R(5, 4),), (R(1, 1),)]),
    M("resnet_basic_block", ev(BasicBlock), (R(1, 4, 5, 5),), [(R(2, 4, 6, 3),), (R(1, 4, 2, 2),)],
      source="torchvision resnet BasicBlock"),
    M("resnet_basic_block_grad", ev(BasicBlock), (R(1, 4, 5, 5),), [(R(2, 4, 6, 3),)], grad=True),
    M("squeeze_excitation", SEBlock, (R(1, 4, 5, 5),), [(R(2, 4, 3, 6),), (R(1, 4, 1, 1),)],
      source="torchvision.ops.SqueezeExcitation"),
    M("vit_patch_embed", PatchEmbed, (R(1, 3, 4, 4),), [(R(2, 3, 6, 4),), (R(3, 3, 2, 2),)],
      source="timm/torchvision ViT patch embedding"),
    M("unet_up_skip", UNetUp, (R(1, 4, 3, 3), R(1, 2, 6, 6)), [(R(2, 4, 2, 5), R(2, 2, 4, 10)),
                                                                 (R(1, 4, 1, 1), R(1, 2, 2, 2))]),
    M("classifier_head", ClassifierHead, (R(1, 3, 8, 8),), [(R(2, 3, 6, 10),), (R(3, 3, 4, 4),)],
      source="torchvision AlexNet/VGG head"),
    M("self_attention_mask", ev(SelfAttention), (R(2, 3, 8), I(2, 2, 3)),
      [(R(1, 5, 8), I(2, 1, 5)), (R(3, 2, 8), torch.ones(3, 2, dtype=torch.long))], source="BERT self-attention"),
    M("multihead_attention", ev(lambda: nn.MultiheadAttention(8, 2, batch_first=True)), (R(2, 3, 8),) * 3,
      [(R(1, 4, 8),) * 3, (R(3, 2, 8), R(3, 5, 8), R(3, 5, 8))], source="torch docs MultiheadAttention"),
    M("transformer_encoder_layer", ev(lambda: nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=True)),
      (R(2, 3, 8),), [(R(1, 5, 8),), (R(3, 2, 8),)], source="torch tutorial: transformer",
      deliberate="torch-check-fails"),
    M("gpt_block_causal", ev(GPTBlock), (R(2, 3, 8),), [(R(1, 5, 8),), (R(3, 2, 8),)],
      source="nanoGPT block", deliberate="torch-check-fails"),
    M("embeddings_positions", Embedder, (I(20, 2, 4),), [(I(20, 3, 7),), (I(20, 1, 2),)],
      source="transformers BertEmbeddings"),
    M("lstm_tagger", LSTMTagger, (I(10, 1, 5),), [(I(10, 2, 7),), (I(10, 3, 2),)],
      source="torch tutorial: LSTM tagger"),
    M("gru_two_outputs", GRUEncoder, (R(2, 3, 4),), [(R(1, 6, 4),), (R(3, 2, 4),)]),
    M("lstm_cell", lambda: nn.LSTMCell(4, 3), (R(2, 4),), [(R(5, 4),), (R(1, 4),)]),
    M("two_heads_tuple", TwoHeads, (R(2, 4),), [(R(5, 4),), (R(1, 4),)], grad=True),
    M("shared_module_twice", SharedTwice, (R(2, 4),), [(R(5, 4),), (R(1, 4),)], grad=True),
    M("modulelist_loop", ModuleListLoop, (R(2, 4),), [(R(5, 4),), (R(1, 4),)]),
    M("moduledict_route", ModuleDictRoute, (R(2, 4),), [(R(5, 4),), (R(1, 4),)]),
    M("direct_param_and_buffer", DirectParam, (R(2, 4),), [(R(5, 4),), (R(1, 4),)], grad=True),
    M("buffer_updated_in_place", Counter, (R(2, 4),), [(R(5, 4),), (R(1, 4),)],
      source="num_batches_tracked-style counters", deliberate="checker-restores-state"),
    M("forward_hooks", Hooked, (R(2, 4),), [(R(5, 4),), (R(1, 4),)], source="torch test_tracer tracing_hooks"),
    M("tuple_argument", TupleIn, (R(2, 4), (R(2, 4), R(2, 4))),
      [(R(5, 4), (R(5, 4), R(5, 4))), (R(1, 4), (R(1, 4), R(1, 4)))], source="test_trace_with_tuple_tensor"),
    M("dict_argument", DictIn, ({"x": R(2, 4), "w": R(2, 2)},),
      [({"x": R(5, 4), "w": R(5, 2)},), ({"w": R(1, 2), "x": R(1, 4)},)]),
    M("none_submodule_skipped", NoneSub, (R(2, 3),), [(R(5, 3),), (R(1, 3),)],
      source="torch test_tracer trace_skip_none_submodule"),
    M("own_parameter_as_example", OwnParamAsInput, lambda m: m.x, [(R(3, 4),), (R(3, 4),)],
      source="torch test_tracer trace_aliased_parameter"),
    M("kwarg_example_keeps_defaults", KwargForward, None, [(R(2, 4),), (R(5, 4),)],
      trace_kwargs={"example_kwarg_inputs": {"x": R(3, 4)}}, source="issue 9: keyword examples"),
    M("kwarg_example_positional_call", KwargForward, None, [(R(2, 4), R(4)), (R(5, 4), R(4))],
      trace_kwargs={"example_kwarg_inputs": {"bias": R(4), "x": R(3, 4)}},
      source="issue 9: keyword examples called by position"),
    M("kwarg_example_keyword_call", KwargForward, None, [(), ()],
      trace_kwargs={"example_kwarg_inputs": {"x": R(3, 4), "bias": R(4)}},
      call_kwargs=[{"x": R(2, 4), "bias": R(4)}, {"bias": R(4), "x": R(6, 4)}]),
]
