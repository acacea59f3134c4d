"""The models bench/serve_corpus19.py runs: none of them is in bench/zoo_models.py. Each entry is
``name: (family, build)``; ``build()`` returns ``(model, example, [(label, new inputs), ...])``: a tuple of
positional arguments, or a dict of keyword arguments (transformers models, traced with
``example_kwarg_inputs`` and ``strict=False``, their ModelOutput compared leaf by leaf). The example is
batch 1; the new input sets are batch 2 at the example's shape and batch 2 at another image size /
sequence length (batch 3 where the model fixes its size). Tiny configs, random weights, BatchNorm
statistics randomised (zoo_models.randomise_batch_norm)."""
from __future__ import annotations

import torch
from torch import nn

from zoo_models import Detections, _torchvision, randomise_batch_norm


def _randn(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def _image_sets(size, new_size, channels=3):
    example = (_randn(1, channels, size, size, seed=1),)
    other = [("b2", (_randn(2, channels, size, size, seed=2),))]
    if new_size:
        other.append((f"b2@{new_size}", (_randn(2, channels, new_size, new_size, seed=3),)))
    else:
        other.append(("b3", (_randn(3, channels, size, size, seed=3),)))
    return example, other


def randomise_zero_weights(model: nn.Module) -> nn.Module:
    """Weights initialised to zero (timm's MLP-Mixer / ResMLP / Sequencer heads) made random: an all-zero head
    answers its bias whatever the input, and every error against eager would be 0."""
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() >= 2 and not p.any():
                p.copy_(torch.randn(p.shape, generator=gen) * 0.05)
    return model


def timm_(name, size=64, new_size=96, **kwargs):
    def build():
        _torchvision()
        import timm
        torch.manual_seed(0)
        model = timm.create_model(name, pretrained=False, num_classes=10, **kwargs)
        model = randomise_batch_norm(randomise_zero_weights(model)).eval()
        return (model, *_image_sets(size, new_size))
    return ("timm", build)


class First(nn.Module):
    def __init__(self, model, key=None):
        super().__init__()
        self.model, self.key = model, key

    def forward(self, *args):
        out = self.model(*args)
        return out[self.key] if self.key is not None else out


def tv_(ctor, size=64, new_size=96, module="", channels=3, frames=None, key=None, **kwargs):
    def build():
        tv = _torchvision()
        torch.manual_seed(0)
        ns = getattr(tv.models, module) if module else tv.models
        model = randomise_batch_norm(getattr(ns, ctor)(weights=None, **kwargs)).eval()
        if key is not None:
            model = First(model, key).eval()
        if frames is None:
            return (model, *_image_sets(size, new_size, channels))
        shape = lambda b, s: (b, channels, frames, s, s)   # noqa: E731
        other = [("b2", (_randn(*shape(2, size), seed=2),))]
        other.append((f"b2@{new_size}", (_randn(*shape(2, new_size), seed=3),)) if new_size else
                     ("b3", (_randn(*shape(3, size), seed=3),)))
        return model, (_randn(*shape(1, size), seed=1),), other
    return ("tv", build)


def tv_detection(ctor, size=96, new_size=128, head_scale=None, batch_norm=True, **kwargs):
    """A torchvision detector. ``head_scale`` shrinks the classification head (SSD300's random logits saturate
    its softmax: every kept score 1.0, a tie whose order is any runtime's choice); ``batch_norm=False`` keeps
    torchvision's BatchNorm statistics. (SSDLite is left out: with random weights its six kept scores tie
    whatever the BatchNorm statistics and head scale, and the boxes of a tie come in any runtime's order.)"""
    def build():
        tv = _torchvision()
        torch.manual_seed(0)
        model = getattr(tv.models.detection, ctor)(weights=None, weights_backbone=None, **kwargs)
        if head_scale is not None:
            with torch.no_grad():
                for p in model.head.classification_head.parameters():
                    p.mul_(head_scale)
        model = randomise_batch_norm(model) if batch_norm else model.eval()
        return (Detections(model).eval(), *_image_sets(size, new_size))
    return ("tv", build)


def tv_flow():
    def build():
        tv = _torchvision()
        torch.manual_seed(0)

        class Flow(nn.Module):
            def __init__(self):
                super().__init__()
                self.model = tv.models.optical_flow.raft_small(weights=None)

            def forward(self, a, b):
                return self.model(a, b, num_flow_updates=3)[-1]

        model = randomise_batch_norm(Flow()).eval()
        pair = lambda b, s, seed: (_randn(b, 3, s, s, seed=seed), _randn(b, 3, s, s, seed=seed + 10))  # noqa
        return model, pair(1, 128, 1), [("b2", pair(2, 128, 2)), ("b2@160", pair(2, 160, 3))]
    return ("tv", build)


# --------------------------------------------------------------------------- transformers
def _text(batch, seq, seed, vocab=1000, mask=True, decoder=False, extra=None):
    gen = torch.Generator().manual_seed(seed)
    out = {"input_ids": torch.randint(3, vocab, (batch, seq), generator=gen)}
    if mask:
        m = torch.ones(batch, seq, dtype=torch.long)
        if batch > 1:
            m[-1, -3:] = 0        # one padded row
        out["attention_mask"] = m
    if decoder:
        out["decoder_input_ids"] = torch.randint(3, vocab, (batch, seq // 2), generator=gen)
    if extra:
        out.update(extra(batch, seq, gen))
    return out


def _hf_model(model_cls, config_cls, config):
    import importlib

    import transformers
    transformers.logging.set_verbosity_error()
    torch.manual_seed(0)

    def find(name):
        if "." not in name:
            return getattr(transformers, name)
        module, _, cls = name.rpartition(".")
        return getattr(importlib.import_module(f"transformers.{module}"), cls)
    cfg = find(config_cls)(**config)
    return randomise_batch_norm(find(model_cls)(cfg)).eval()


def hf_text(model_cls, config_cls, seq=16, new_seq=24, mask=True, decoder=False, extra=None, vocab=1000, **config):
    def build():
        model = _hf_model(model_cls, config_cls, config)
        kw = dict(vocab=vocab, mask=mask, decoder=decoder, extra=extra)
        return model, _text(1, seq, 1, **kw), [("b2", _text(2, seq, 2, **kw)),
                                               (f"b2@s{new_seq}", _text(2, new_seq, 3, **kw))]
    return ("hf", build)


def hf_pixels(model_cls, config_cls, size=64, new_size=96, name="pixel_values", channels=3, **config):
    def build():
        model = _hf_model(model_cls, config_cls, config)
        ex, other = _image_sets(size, new_size, channels)
        return model, {name: ex[0]}, [(label, {name: i[0]}) for label, i in other]
    return ("hf", build)


def hf_audio(model_cls, config_cls, seq=1600, new_seq=2400, **config):
    def build():
        model = _hf_model(model_cls, config_cls, config)
        return model, {"input_values": _randn(1, seq, seed=1)}, [
            ("b2", {"input_values": _randn(2, seq, seed=2)}), (f"b2@{new_seq}", {"input_values": _randn(2, new_seq, seed=3)})]
    return ("hf", build)


BERTISH = dict(vocab_size=1000, hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
               max_position_embeddings=64)
DECODER = dict(vocab_size=1000, hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
               intermediate_size=128, max_position_embeddings=64, use_cache=False)
SEQ2SEQ = dict(vocab_size=1000, d_model=64, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
               decoder_attention_heads=4, encoder_ffn_dim=128, decoder_ffn_dim=128, max_position_embeddings=64,
               use_cache=False, pad_token_id=1, decoder_start_token_id=2)
VIT = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128)
AUDIO = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
             conv_dim=(32, 32, 32), conv_stride=(5, 4, 2), conv_kernel=(10, 4, 2),
             num_conv_pos_embeddings=16, num_conv_pos_embedding_groups=4)


def _bbox(batch, seq, gen):
    xy = torch.randint(0, 500, (batch, seq, 2), generator=gen)
    return {"bbox": torch.cat([xy, xy + torch.randint(0, 400, (batch, seq, 2), generator=gen)], -1)}


MODELS = {
    # ------------------------------------------------------------------ timm
    "mobilevit_xxs": timm_("mobilevit_xxs"),
    "hrnet_w18_small": timm_("hrnet_w18_small"),
    "cs3darknet_focus_s": timm_("cs3darknet_focus_s"),
    "res2net50_14w_8s": timm_("res2net50_14w_8s"),
    "skresnet18": timm_("skresnet18"),
    "selecsls42b": timm_("selecsls42b"),
    "ese_vovnet19b_dw": timm_("ese_vovnet19b_dw"),
    "rexnet_100": timm_("rexnet_100"),
    "lcnet_050": timm_("lcnet_050"),
    "tresnet_m": timm_("tresnet_m"),
    "hgnetv2_b0": timm_("hgnetv2_b0"),
    "dpn48b": timm_("dpn48b"),
    "efficientformer_l1": timm_("efficientformer_l1", 224, None),
    "efficientformerv2_s0": timm_("efficientformerv2_s0", 64, None, img_size=64),
    "coatnet_nano": timm_("coatnet_nano_rw_224", 64, None, img_size=64),
    "nest_tiny": timm_("nest_tiny", 64, None, img_size=64),
    "cait_xxs24": timm_("cait_xxs24_224", 64, None, img_size=64, depth=4),
    "beit_tiny": timm_("beit_base_patch16_224", 64, None, img_size=64, embed_dim=64, depth=2, num_heads=4),
    "crossvit_tiny": timm_("crossvit_tiny_240", 120, None, img_size=120),
    "gcvit_xxtiny": timm_("gcvit_xxtiny", 64, None, img_size=64),
    "twins_svt_small": timm_("twins_svt_small", 64, 96),
    "twins_pcpvt_small": timm_("twins_pcpvt_small", 64, 96),
    "volo_d1": timm_("volo_d1_224", 64, None, img_size=64),
    "visformer_tiny": timm_("visformer_tiny", 64, None, img_size=64),
    "pit_ti": timm_("pit_ti_224", 64, None, img_size=64),
    "convit_tiny": timm_("convit_tiny", 64, None, img_size=64),
    "sequencer2d_s": timm_("sequencer2d_s", 64, None, img_size=64),
    "botnet26t": timm_("botnet26t_256", 64, None, img_size=64),
    "lambda_resnet26t": timm_("lambda_resnet26t", 64, None, img_size=64),
    "mixer_s16": timm_("mixer_s16_224", 64, None, img_size=64),
    "resmlp_12": timm_("resmlp_12_224", 64, None, img_size=64),
    "gmlp_ti16": timm_("gmlp_ti16_224", 64, None, img_size=64),
    "mobilenetv4_conv_small": timm_("mobilenetv4_conv_small"),
    "mobileone_s0": timm_("mobileone_s0"),
    "starnet_s050": timm_("starnet_s050"),
    "repghostnet_050": timm_("repghostnet_050"),
    "fasternet_t0": timm_("fasternet_t0"),
    "efficientvit_b0": timm_("efficientvit_b0"),
    "inception_next_atto": timm_("inception_next_atto"),
    "mambaout_femto": timm_("mambaout_femto"),
    "focalnet_tiny_srf": timm_("focalnet_tiny_srf", 64, 96),
    "davit_tiny": timm_("davit_tiny", 64, 96),
    "hiera_tiny": timm_("hiera_tiny_224", 64, None, img_size=64),
    "swinv2_cr_tiny": timm_("swinv2_cr_tiny_ns_224", 64, None, img_size=64),
    "mvitv2_tiny": timm_("mvitv2_tiny", 64, None, img_size=64),
    "ghostnetv2_100": timm_("ghostnetv2_100"),
    "xception41": timm_("xception41"),
    "mixnet_s": timm_("mixnet_s"),
    "resnest14d": timm_("resnest14d"),
    "regnetz_005": timm_("regnetz_005"),
    "gernet_s": timm_("gernet_s"),
    "coat_lite_tiny": timm_("coat_lite_tiny", 64, None, img_size=64),
    "shvit_s1": timm_("shvit_s1"),
    "nextvit_small": timm_("nextvit_small"),
    "tnt_s": timm_("tnt_s_patch16_224", 64, None, img_size=64),
    "rdnet_tiny": timm_("rdnet_tiny"),
    "vit_relpos_small": timm_("vit_relpos_small_patch16_224", 64, None, img_size=64),
    "deit3_small": timm_("deit3_small_patch16_224", 64, None, img_size=64),
    "samvit_tiny": timm_("samvit_base_patch16", 64, None, img_size=64, embed_dim=64, depth=2, num_heads=4,
                         global_attn_indexes=(1,)),
    "csatv2": timm_("csatv2"),
    # ------------------------------------------------------------------ torchvision
    "ssd300_vgg16": tv_detection("ssd300_vgg16", head_scale=0.05, num_classes=5, score_thresh=0.0, detections_per_img=6,
                                 topk_candidates=20),
    "fcos_resnet50": tv_detection("fcos_resnet50_fpn", num_classes=5, min_size=96, max_size=128,
                                  score_thresh=0.0, detections_per_img=6, topk_candidates=20),
    "keypointrcnn": tv_detection("keypointrcnn_resnet50_fpn", num_classes=2, min_size=96, max_size=128,
                                 box_score_thresh=0.0, rpn_pre_nms_top_n_test=30, rpn_post_nms_top_n_test=12,
                                 box_detections_per_img=6),
    "raft_small": tv_flow(),
    "r3d_18": tv_("r3d_18", 32, 48, module="video", frames=4, num_classes=10),
    "mc3_18": tv_("mc3_18", 32, 48, module="video", frames=4, num_classes=10),
    "swin3d_t": tv_("swin3d_t", 32, 64, module="video", frames=4, num_classes=10),
    "vit_b_16_tv": tv_("vit_b_16", 64, None, image_size=64, num_classes=10),
    "regnet_y_800mf": tv_("regnet_y_800mf", num_classes=10),
    "deeplabv3_resnet50": tv_("deeplabv3_resnet50", module="segmentation", key="out", weights_backbone=None, num_classes=5),
    # ------------------------------------------------------------------ transformers text
    "mobilebert": hf_text("MobileBertModel", "MobileBertConfig", embedding_size=32, intra_bottleneck_size=32,
                          true_hidden_size=32, num_feedforward_networks=2, **BERTISH),
    "funnel": hf_text("FunnelModel", "FunnelConfig", vocab_size=1000, block_sizes=[1, 1], d_model=64, n_head=4,
                      d_head=16, d_inner=128),
    "xlnet": hf_text("XLNetModel", "XLNetConfig", vocab_size=1000, d_model=64, n_layer=2, n_head=4, d_inner=128),
    "longformer": hf_text("LongformerModel", "LongformerConfig", attention_window=8, **BERTISH),
    "mpnet": hf_text("MPNetModel", "MPNetConfig", **BERTISH),
    "squeezebert": hf_text("SqueezeBertModel", "SqueezeBertConfig", embedding_size=64, **BERTISH),
    "convbert": hf_text("ConvBertModel", "ConvBertConfig", embedding_size=64, **BERTISH),
    "canine": hf_text("CanineModel", "CanineConfig", hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                      intermediate_size=128, downsampling_rate=4, num_hash_buckets=64, vocab=1000),
    "layoutlm": hf_text("LayoutLMModel", "LayoutLMConfig", extra=_bbox, **BERTISH),
    "big_bird": hf_text("BigBirdModel", "BigBirdConfig", attention_type="original_full", **BERTISH),
    "data2vec_text": hf_text("Data2VecTextModel", "Data2VecTextConfig", **BERTISH),
    "clip_text": hf_text("CLIPTextModel", "CLIPTextConfig", vocab_size=1000, hidden_size=64, num_hidden_layers=2,
                         num_attention_heads=4, intermediate_size=128, max_position_embeddings=64),
    "bloom": hf_text("BloomModel", "BloomConfig", vocab_size=1000, hidden_size=64, n_layer=2, n_head=4,
                     use_cache=False),
    "gpt_neox": hf_text("GPTNeoXModel", "GPTNeoXConfig", **{k: v for k, v in DECODER.items()
                                                           if k != "num_key_value_heads"}),
    "opt": hf_text("OPTModel", "OPTConfig", vocab_size=1000, hidden_size=64, num_hidden_layers=2,
                   num_attention_heads=4, ffn_dim=128, max_position_embeddings=64, word_embed_proj_dim=64,
                   use_cache=False),
    "falcon": hf_text("FalconModel", "FalconConfig", vocab_size=1000, hidden_size=64, num_hidden_layers=2,
                      num_attention_heads=4, use_cache=False),
    "phi": hf_text("PhiModel", "PhiConfig", **DECODER),
    "gemma": hf_text("GemmaModel", "GemmaConfig", head_dim=16, **DECODER),
    "gemma2": hf_text("Gemma2Model", "Gemma2Config", head_dim=16, sliding_window=8, **DECODER),
    "mixtral": hf_text("MixtralModel", "MixtralConfig", num_local_experts=4, num_experts_per_tok=2, **DECODER),
    "qwen2_moe": hf_text("Qwen2MoeModel", "Qwen2MoeConfig", num_experts=4, num_experts_per_tok=2,
                         moe_intermediate_size=32, shared_expert_intermediate_size=64, **DECODER),
    "gptj": hf_text("GPTJModel", "GPTJConfig", vocab_size=1000, n_embd=64, n_layer=2, n_head=4, rotary_dim=8,
                    n_positions=64, use_cache=False),
    "gpt_neo": hf_text("GPTNeoModel", "GPTNeoConfig", vocab_size=1000, hidden_size=64, num_layers=2, num_heads=4,
                       attention_types=[[["global", "local"], 1]], window_size=8, max_position_embeddings=64,
                       use_cache=False),
    "codegen": hf_text("CodeGenModel", "CodeGenConfig", vocab_size=1000, n_embd=64, n_layer=2, n_head=4,
                       rotary_dim=8, n_positions=64, use_cache=False),
    "biogpt": hf_text("BioGptModel", "BioGptConfig", **{k: v for k, v in DECODER.items()
                                                       if k != "num_key_value_heads"}),
    "xglm": hf_text("XGLMModel", "XGLMConfig", vocab_size=1000, d_model=64, num_layers=2, attention_heads=4,
                    ffn_dim=128, max_position_embeddings=64, use_cache=False),
    "stablelm": hf_text("StableLmModel", "StableLmConfig", **DECODER),
    "starcoder2": hf_text("Starcoder2Model", "Starcoder2Config", **DECODER),
    "olmo": hf_text("OlmoModel", "OlmoConfig", **DECODER),
    "phi3": hf_text("Phi3Model", "Phi3Config", pad_token_id=0, **DECODER),
    "cohere": hf_text("CohereModel", "CohereConfig", **DECODER),
    "mamba": hf_text("MambaModel", "MambaConfig", mask=False, vocab_size=1000, hidden_size=64,
                     num_hidden_layers=2, state_size=8, use_cache=False),
    "rwkv": hf_text("RwkvModel", "RwkvConfig", mask=False, vocab_size=1000, hidden_size=64, num_hidden_layers=2,
                    attention_hidden_size=64, intermediate_size=128, context_length=64, use_cache=False),
    "pegasus": hf_text("PegasusModel", "PegasusConfig", decoder=True, **SEQ2SEQ),
    "marian": hf_text("MarianModel", "MarianConfig", decoder=True, decoder_vocab_size=1000, **SEQ2SEQ),
    "mbart": hf_text("MBartModel", "MBartConfig", decoder=True, **SEQ2SEQ),
    "blenderbot": hf_text("BlenderbotModel", "BlenderbotConfig", decoder=True, **SEQ2SEQ),
    "m2m100": hf_text("M2M100Model", "M2M100Config", decoder=True, **SEQ2SEQ),
    "led": hf_text("LEDModel", "LEDConfig", decoder=True, attention_window=8, max_encoder_position_embeddings=64,
                   max_decoder_position_embeddings=64,
                   **{k: v for k, v in SEQ2SEQ.items() if k != "max_position_embeddings"}),
    "mt5": hf_text("MT5Model", "MT5Config", decoder=True, vocab_size=1000, d_model=64, d_kv=16, d_ff=128,
                   num_layers=2, num_heads=4, use_cache=False),
    "prophetnet": hf_text("ProphetNetModel", "ProphetNetConfig", decoder=True, vocab_size=1000, hidden_size=64,
                          num_encoder_layers=2, num_decoder_layers=2, num_encoder_attention_heads=4,
                          num_decoder_attention_heads=4, encoder_ffn_dim=128, decoder_ffn_dim=128, ngram=2,
                          use_cache=False),
    # ------------------------------------------------------------------ transformers vision / audio
    "dinov2": hf_pixels("Dinov2Model", "Dinov2Config", image_size=64, patch_size=8, **VIT),
    "beit_hf": hf_pixels("BeitModel", "BeitConfig", 64, None, image_size=64, patch_size=8,
                         use_relative_position_bias=True, **VIT),
    "deit_hf": hf_pixels("DeiTModel", "DeiTConfig", 64, None, image_size=64, patch_size=8, **VIT),
    "data2vec_vision": hf_pixels("Data2VecVisionModel", "Data2VecVisionConfig", 64, None, image_size=64,
                                 patch_size=8, use_relative_position_bias=True, **VIT),
    "clip_vision": hf_pixels("CLIPVisionModel", "CLIPVisionConfig", 64, None, image_size=64, patch_size=8, **VIT),
    "siglip_vision": hf_pixels("SiglipVisionModel", "SiglipVisionConfig", 64, None, image_size=64, patch_size=8,
                               **VIT),
    "blip_vision": hf_pixels("models.blip.modeling_blip.BlipVisionModel", "BlipVisionConfig", 64, None,
                             image_size=64, patch_size=8, **VIT),
    "yolos": hf_pixels("YolosModel", "YolosConfig", 64, 96, image_size=[64, 64], patch_size=8,
                       num_detection_tokens=5, **VIT),
    "mobilevit_hf": hf_pixels("MobileViTModel", "MobileViTConfig", 64, 96, hidden_sizes=[32, 48, 64],
                              neck_hidden_sizes=[8, 8, 16, 16, 24, 32, 64]),
    "mobilenet_v2_hf": hf_pixels("MobileNetV2Model", "MobileNetV2Config", depth_multiplier=0.35),
    "efficientnet_hf": hf_pixels("EfficientNetModel", "EfficientNetConfig", image_size=64,
                                 width_coefficient=1.0, depth_coefficient=1.0, hidden_dim=1280),
    "bit": hf_pixels("BitModel", "BitConfig", hidden_sizes=[64, 128, 256, 512], num_groups=8, depths=[1, 1, 1, 1],
                     embedding_size=32),
    "glpn": hf_pixels("GLPNModel", "GLPNConfig", hidden_sizes=[16, 32, 64, 128], num_attention_heads=[1, 2, 2, 4],
                      depths=[1, 1, 1, 1], decoder_hidden_size=32),
    "dpt": hf_pixels("DPTModel", "DPTConfig", 64, None, image_size=64, patch_size=8, backbone_out_indices=[0, 1],
                     neck_hidden_sizes=[16, 32], **VIT),
    "convnextv2_hf": hf_pixels("ConvNextV2Model", "ConvNextV2Config", hidden_sizes=[16, 32, 64, 128],
                               depths=[1, 1, 1, 1]),
    "swinv2_hf": hf_pixels("Swinv2Model", "Swinv2Config", image_size=64, patch_size=4, embed_dim=24,
                           depths=[1, 1], num_heads=[2, 4], window_size=4),
    "levit_hf": hf_pixels("LevitModel", "LevitConfig", 64, None, image_size=64, hidden_sizes=[32, 48, 64],
                          num_attention_heads=[2, 2, 2], depths=[1, 1, 1], key_dim=[8, 8, 8]),
    "focalnet_hf": hf_pixels("FocalNetModel", "FocalNetConfig", image_size=64, embed_dim=16, depths=[1, 1, 1, 1]),
    "hiera_hf": hf_pixels("HieraModel", "HieraConfig", 64, None, image_size=[64, 64], embed_dim=16,
                          num_heads=[1, 1, 1, 1], depths=[1, 1, 1, 1], masked_unit_size=[8, 8],
                          query_stride=[2, 2]),
    "hubert": hf_audio("HubertModel", "HubertConfig", **AUDIO),
    "wavlm": hf_audio("WavLMModel", "WavLMConfig", num_buckets=32, max_bucket_distance=100, **AUDIO),
    "sew": hf_audio("SEWModel", "SEWConfig", squeeze_factor=2, **AUDIO),
    "unispeech": hf_audio("UniSpeechModel", "UniSpeechConfig", **AUDIO),
    "data2vec_audio": hf_audio("Data2VecAudioModel", "Data2VecAudioConfig", conv_pos_kernel_size=5,
                               num_conv_pos_embeddings=5, **{k: v for k, v in AUDIO.items()
                                                             if k != "num_conv_pos_embeddings"}),
    "w2v2_conformer": hf_audio("Wav2Vec2ConformerModel", "Wav2Vec2ConformerConfig",
                               position_embeddings_type="rotary", conv_depthwise_kernel_size=7, **AUDIO),
    "speecht5_encoder": ("hf", None),   # filled below
}


def _speecht5():
    model = _hf_model("models.speecht5.modeling_speecht5.SpeechT5EncoderWithSpeechPrenet", "SpeechT5Config",
                      dict(hidden_size=64, encoder_layers=2, encoder_attention_heads=4, encoder_ffn_dim=128,
                           conv_dim=(32, 32, 32), conv_stride=(5, 4, 2), conv_kernel=(10, 4, 2),
                           num_conv_pos_embeddings=16, num_conv_pos_embedding_groups=4))
    return model, {"input_values": _randn(1, 1600, seed=1)}, [
        ("b2", {"input_values": _randn(2, 1600, seed=2)}), ("b2@2400", {"input_values": _randn(2, 2400, seed=3)})]


MODELS["speecht5_encoder"] = ("hf", _speecht5)
