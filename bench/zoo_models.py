"""The bench zoo's models (bench_zoo.py): architectures nobody tuned tracejit for, random weights, small.

``ZOO`` maps a name to a builder returning ``(module, make_inputs)``: ``module`` is in eval mode and
returns one tensor (a tuple of tensors for detection), ``make_inputs(batch, new=False)`` the call's
arguments; ``new=True`` gives another shape (a larger image or sequence), for checking a program on
inputs it was not built on. torchvision comes from the folder ``make test`` installs it in
(tests/models/torchvision_ops.py: its C++ ops are defined in pure torch there); transformers models are
built from small configs (no downloads). BatchNorm statistics and affine parameters are randomised,
so folding them is not a no-op.
"""
from __future__ import annotations

import os
import sys
from typing import Any, Callable

import torch
from torch import nn

_TESTS_MODELS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests", "models")


def _torchvision():
    if _TESTS_MODELS not in sys.path:
        sys.path.append(_TESTS_MODELS)
    from torchvision_ops import import_torchvision
    tv = import_torchvision()
    if tv is None:
        raise RuntimeError("torchvision is not installed (make test installs it)")
    return tv


def _timm(name: str, size: int, new_size: int | None = None, **kwargs) -> Callable:
    """A timm model (``timm.create_model``, random weights, 10 classes) on ``size`` pixel images; transformers
    made for another size are built for ``size`` (``img_size``). Without ``new_size`` (the model fixes its
    size) the new inputs are another batch of the same size."""
    def build():
        _torchvision()   # timm imports torchvision
        import timm
        torch.manual_seed(0)
        try:
            model = timm.create_model(name, pretrained=False, num_classes=10, img_size=size, **kwargs)
        except TypeError:   # a convnet: any size
            model = timm.create_model(name, pretrained=False, num_classes=10, **kwargs)
        images = _images(3, size, new_size or size)

        def make(batch, new=False):
            return images(batch + 1 if new and new_size is None else batch, new)
        return First(randomise_batch_norm(model)).eval(), make
    return build


def to_device(value: Any, device: str) -> Any:
    """``value`` (a tensor, or tuples / lists / dicts of them: a model's inputs) moved to ``device``."""
    if isinstance(value, torch.Tensor):
        return value.to(device)
    if isinstance(value, (tuple, list)):
        return type(value)(to_device(v, device) for v in value)
    if isinstance(value, dict):
        return {k: to_device(v, device) for k, v in value.items()}
    return value


def randomise_batch_norm(module: nn.Module, seed: int = 0) -> nn.Module:
    """Give every BatchNorm non-trivial running statistics and affine parameters (eval mode)."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for m in module.modules():
            if isinstance(m, nn.modules.batchnorm._BatchNorm) and m.running_mean is not None:
                n = m.running_mean.numel()
                m.running_mean.copy_(torch.randn(n, generator=gen) * 0.1)
                m.running_var.copy_(torch.rand(n, generator=gen) * 1.5 + 0.5)
                if m.affine:
                    m.weight.copy_(1 + torch.randn(n, generator=gen) * 0.2)
                    m.bias.copy_(torch.randn(n, generator=gen) * 0.1)
    return module.eval()


class First(nn.Module):
    """A model's first output (or its ``key`` entry) as the one tensor every peer can compare."""

    def __init__(self, model: nn.Module, key: str | None = None):
        super().__init__()
        self.model, self.key = model, key

    def forward(self, *args):
        out = self.model(*args)
        if self.key is not None:
            return out[self.key]
        return out if isinstance(out, torch.Tensor) else out[0]


def _images(channels=3, size=64, new_size=80):
    def make(batch, new=False):
        s = new_size if new else size
        return (torch.randn(batch, channels, s, s, generator=torch.Generator().manual_seed(batch + s)),)
    return make


def _vision(ctor: str, size=64, new_size=80, key=None, **kwargs) -> Callable:
    def build():
        tv = _torchvision()
        torch.manual_seed(0)
        model = getattr(tv.models if key is None else tv.models.segmentation, ctor)(weights=None, **kwargs)
        return First(randomise_batch_norm(model), key).eval(), _images(3, size, new_size)
    return build


def _vision_class(make_model: Callable, size=64, new_size=80) -> Callable:
    def build():
        tv = _torchvision()
        torch.manual_seed(0)
        return First(randomise_batch_norm(make_model(tv.models))).eval(), _images(3, size, new_size)
    return build


class Detections(nn.Module):
    """A detector's list of dicts as a flat tuple of tensors; a batch is a list of images."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, images):
        return tuple(t for out in self.model(list(images.unbind(0))) for t in out.values())


def _detection(ctor: str = "fasterrcnn_mobilenet_v3_large_320_fpn", **kwargs) -> Callable:
    """A torchvision detector with random weights on 96-128 pixel images, 6 detections per image."""
    def build():
        tv = _torchvision()
        torch.manual_seed(0)
        heads = kwargs or dict(box_score_thresh=0.0, rpn_pre_nms_top_n_test=30, rpn_post_nms_top_n_test=12,
                               box_detections_per_img=6)
        model = getattr(tv.models.detection, ctor)(weights=None, weights_backbone=None, num_classes=5, min_size=96,
                                                   max_size=128, **heads)
        return Detections(randomise_batch_norm(model)).eval(), _images(3, 96, 112)
    return build


def _text(ids=1000, seq=16, new_seq=24, mask=True, decoder=False):
    def make(batch, new=False):
        n = new_seq if new else seq
        gen = torch.Generator().manual_seed(batch * 100 + n)
        out = [torch.randint(0, ids, (batch, n), generator=gen)]
        if mask:
            m = torch.ones(batch, n, dtype=torch.long)
            m[:, -3:] = 0      # padding: the mask moves the output
            out.append(m)
        if decoder:
            out.append(torch.randint(0, ids, (batch, n // 2), generator=gen))
        return tuple(out)
    return make


class HFModel(nn.Module):
    """A transformers model called with named inputs, its first output returned."""

    def __init__(self, model: nn.Module, names: tuple):
        super().__init__()
        self.model, self.names = model, names

    def forward(self, *args):
        out = self.model(**dict(zip(self.names, args)), return_dict=False)
        return out[0]


def _hf(model_cls: str, config_cls: str, names=("input_ids", "attention_mask"), inputs=None, **config) -> Callable:
    def build():
        import transformers
        transformers.logging.set_verbosity_error()
        torch.manual_seed(0)
        cfg = getattr(transformers, config_cls)(**config)
        model = _hf_class(transformers, model_cls)(cfg).eval()
        make = inputs or _text(mask="attention_mask" in names, decoder="decoder_input_ids" in names)
        return HFModel(randomise_batch_norm(model), names).eval(), make
    return build


def _hf_class(transformers, name: str):
    """``transformers.<name>``, or a class inside a module of it (``models.whisper.modeling_whisper.X``)."""
    if "." not in name:
        return getattr(transformers, name)
    import importlib
    module, _, cls = name.rpartition(".")
    return getattr(importlib.import_module(f"transformers.{module}"), cls)


_BERTISH = dict(vocab_size=1000, hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
                max_position_embeddings=64)
_DECODER = dict(vocab_size=1000, hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                intermediate_size=128, max_position_embeddings=64, use_cache=False)
_VIT = dict(image_size=32, patch_size=8, num_channels=3, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
            intermediate_size=128)


def _audio(seq=800, new_seq=1200):
    def make(batch, new=False):
        n = new_seq if new else seq
        return (torch.randn(batch, n, generator=torch.Generator().manual_seed(batch + n)),)
    return make


def _features(mels=16, frames=64):
    def make(batch, new=False):   # whisper's encoder takes exactly 2 * max_source_positions frames: batch moves
        b = batch + 1 if new else batch
        return (torch.randn(b, mels, frames, generator=torch.Generator().manual_seed(b)),)
    return make


def _vit_class(models):
    return models.VisionTransformer(image_size=64, patch_size=16, num_layers=2, num_heads=2, hidden_dim=64,
                                    mlp_dim=128, num_classes=10)


def _swin_class(models):
    from torchvision.models.swin_transformer import SwinTransformer
    return SwinTransformer(patch_size=[4, 4], embed_dim=24, depths=[2, 2], num_heads=[2, 4], window_size=[4, 4],
                           num_classes=10)


def _maxvit_class(models):
    from torchvision.models.maxvit import MaxVit
    return MaxVit(input_size=(64, 64), stem_channels=16, partition_size=2, block_channels=[16, 32],
                  block_layers=[1, 1], head_dim=8, stochastic_depth_prob=0.0, num_classes=10)


ZOO: dict[str, Callable[[], tuple[nn.Module, Any]]] = {
    # torchvision classification, every family
    "resnet18": _vision("resnet18", num_classes=10),
    "resnet50": _vision("resnet50", num_classes=10),
    "resnext50_32x4d": _vision("resnext50_32x4d", num_classes=10),
    "wide_resnet50_2": _vision("wide_resnet50_2", num_classes=10),
    "densenet121": _vision("densenet121", num_classes=10),
    "mobilenet_v2": _vision("mobilenet_v2", num_classes=10),
    "mobilenet_v3_small": _vision("mobilenet_v3_small", num_classes=10),
    "mobilenet_v3_large": _vision("mobilenet_v3_large", num_classes=10),
    "efficientnet_b0": _vision("efficientnet_b0", num_classes=10),
    "efficientnet_v2_s": _vision("efficientnet_v2_s", num_classes=10),
    "regnet_y_400mf": _vision("regnet_y_400mf", num_classes=10),
    "regnet_x_400mf": _vision("regnet_x_400mf", num_classes=10),
    "shufflenet_v2_x0_5": _vision("shufflenet_v2_x0_5", num_classes=10),
    "squeezenet1_1": _vision("squeezenet1_1", num_classes=10),
    "mnasnet0_5": _vision("mnasnet0_5", num_classes=10),
    "googlenet": _vision("googlenet", num_classes=10, aux_logits=False, init_weights=True),
    "inception_v3": _vision("inception_v3", size=80, new_size=96, num_classes=10, aux_logits=False,
                            init_weights=True),
    "convnext_tiny": _vision("convnext_tiny", num_classes=10),
    "alexnet": _vision("alexnet", num_classes=10),
    "vgg11_bn": _vision("vgg11_bn", num_classes=10),
    "vit_tv": _vision_class(_vit_class, new_size=64),
    "swin_tv": _vision_class(_swin_class),
    "maxvit_tv": _vision_class(_maxvit_class, new_size=64),
    # torchvision segmentation and detection
    "fcn_resnet50": _vision("fcn_resnet50", key="out", weights_backbone=None, num_classes=5, aux_loss=False),
    "deeplabv3_mobilenet": _vision("deeplabv3_mobilenet_v3_large", key="out", weights_backbone=None,
                                   num_classes=5, aux_loss=False),
    "lraspp_mobilenet": _vision("lraspp_mobilenet_v3_large", key="out", weights_backbone=None, num_classes=5),
    "fasterrcnn_mobilenet": _detection(),
    "retinanet_resnet50": _detection("retinanet_resnet50_fpn", score_thresh=0.0, topk_candidates=20,
                                     detections_per_img=6),
    "maskrcnn_resnet50": _detection("maskrcnn_resnet50_fpn"),
    # transformers encoders
    "bert": _hf("BertModel", "BertConfig", **_BERTISH),
    "roberta": _hf("RobertaModel", "RobertaConfig", **_BERTISH),
    "distilbert": _hf("DistilBertModel", "DistilBertConfig", vocab_size=1000, dim=64, n_layers=2, n_heads=4,
                      hidden_dim=128, max_position_embeddings=64),
    "albert": _hf("AlbertModel", "AlbertConfig", embedding_size=32, **_BERTISH),
    "electra": _hf("ElectraModel", "ElectraConfig", embedding_size=32, **_BERTISH),
    "deberta_v2": _hf("DebertaV2Model", "DebertaV2Config", relative_attention=True, pos_att_type=["p2c", "c2p"],
                      position_buckets=16, max_relative_positions=32, **_BERTISH),
    # decoders
    "gpt2": _hf("GPT2Model", "GPT2Config", vocab_size=1000, n_embd=64, n_layer=2, n_head=4, n_positions=64,
                use_cache=False),
    "llama": _hf("LlamaModel", "LlamaConfig", **_DECODER),
    "mistral": _hf("MistralModel", "MistralConfig", **_DECODER),
    "qwen2": _hf("Qwen2Model", "Qwen2Config", **_DECODER),
    # encoder-decoder
    "t5": _hf("T5Model", "T5Config", names=("input_ids", "attention_mask", "decoder_input_ids"), vocab_size=1000,
              d_model=64, d_kv=16, d_ff=128, num_layers=2, num_heads=4, use_cache=False),
    "bart": _hf("BartModel", "BartConfig", names=("input_ids", "attention_mask", "decoder_input_ids"),
                vocab_size=1000, d_model=64, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
                decoder_attention_heads=4, encoder_ffn_dim=128, decoder_ffn_dim=128, max_position_embeddings=64,
                use_cache=False),
    # audio
    "wav2vec2": _hf("Wav2Vec2Model", "Wav2Vec2Config", names=("input_values",), inputs=_audio(),
                    hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
                    conv_dim=(32, 32, 32), conv_stride=(5, 4, 2), conv_kernel=(10, 4, 2),
                    num_conv_pos_embeddings=16, num_conv_pos_embedding_groups=4),
    "whisper_encoder": _hf("models.whisper.modeling_whisper.WhisperEncoder", "WhisperConfig",
                           names=("input_features",), inputs=_features(),
                           num_mel_bins=16, d_model=64, encoder_layers=2, encoder_attention_heads=4,
                           encoder_ffn_dim=128, max_source_positions=32, vocab_size=1000),
    # transformers vision
    "vit_hf": _hf("ViTModel", "ViTConfig", names=("pixel_values",), inputs=_images(3, 32, 32), **_VIT),
    "convnext_hf": _hf("ConvNextModel", "ConvNextConfig", names=("pixel_values",), inputs=_images(3, 64, 96),
                       hidden_sizes=[16, 32, 64, 128], depths=[1, 1, 2, 1]),
    "swin_hf": _hf("SwinModel", "SwinConfig", names=("pixel_values",), inputs=_images(3, 64, 96), image_size=64,
                   patch_size=4, embed_dim=24, depths=[1, 1], num_heads=[2, 4], window_size=4),
    "segformer": _hf("SegformerModel", "SegformerConfig", names=("pixel_values",), inputs=_images(3, 64, 96),
                     hidden_sizes=[16, 32, 64, 128], num_attention_heads=[1, 2, 2, 4], depths=[1, 1, 1, 1],
                     decoder_hidden_size=64),
    "resnet_hf": _hf("ResNetModel", "ResNetConfig", names=("pixel_values",), inputs=_images(3, 64, 96),
                     hidden_sizes=[32, 64, 128, 256], depths=[1, 1, 1, 1], embedding_size=16),
    # timm: the models issue #25 found slow, inexact or not exportable, and one of each other family
    "levit_128s": _timm("levit_128s", 128),
    "pvt_v2_b0": _timm("pvt_v2_b0", 96, 128),
    "eva02_tiny": _timm("eva02_tiny_patch14_224", 112),
    "deit_tiny": _timm("deit_tiny_patch16_224", 112),
    "xcit_nano": _timm("xcit_nano_12_p16_224", 112, 128),
    "vit_tiny": _timm("vit_tiny_patch16_224", 112),
    "edgenext_xx_small": _timm("edgenext_xx_small", 96, 128),
    "mobilenetv3_small_timm": _timm("mobilenetv3_small_100", 96, 128),
    "efficientnet_b0_timm": _timm("efficientnet_b0", 96, 128),
    "regnety_004_timm": _timm("regnety_004", 96, 128),
    "inception_v3_timm": _timm("inception_v3", 96, 128),
    "nfnet_l0": _timm("nfnet_l0", 96, 128),
    "ghostnet_100": _timm("ghostnet_100", 96, 128),
    "maxvit_tiny": _timm("maxvit_tiny_tf_224", 64),
    "swin_tiny_timm": _timm("swin_tiny_patch4_window7_224", 112),
    "mobilevitv2_050": _timm("mobilevitv2_050", 96, 128),
    "convnext_atto": _timm("convnext_atto", 96, 128),
    "poolformer_s12": _timm("poolformer_s12", 96, 128),
    "fastvit_t8": _timm("fastvit_t8", 96, 128),
    "tiny_vit_5m": _timm("tiny_vit_5m_224", 224),
    "repvgg_a0": _timm("repvgg_a0", 96, 128),
    "dla34": _timm("dla34", 96, 128),
}
