"""Transformers architectures no earlier sweep held (session 30, reach30): trace, call at NEW shapes, save / load,
optimize, each against eager, with torch.jit.trace beside it. Not a test: a table for the findings.

Per model (tiny config, random weights, built here; bench/serve_corpus19_models.py's builders), traced fresh
(no eager call first) on its batch-1 example, then on each new input set (batch 2; batch 2 at another length /
image size):

- ``new``: the traced program, live (a failed guard traces again);
- ``load``: saved right after the trace, loaded, called (eager's answer or a GuardError naming the line);
- ``ofi``: ``optimize_for_inference(traced)``;
- ``jit``: plain ``torch.jit.trace`` on the same example, called on the same new inputs (the reference users
  compare against: its error, or its exception's first words).

Each cell is the largest absolute error against eager over every output tensor and input set, or the exception's
first words. ``wrong`` lists the tracejit columns whose error passes ``1e-4 * max(1, |output|)``: a silently
wrong answer.

Usage::

    python bench/reach_sweep30.py [--models a,b] [--rows FILE] [--timeout S]   # one subprocess per model
    python bench/reach_sweep30.py --from-rows FILE                             # the table only
    python bench/reach_sweep30.py --one NAME                                   # in this process, one JSON line
"""
from __future__ import annotations

import argparse
import io
import json
import os
import subprocess
import sys
import time
import warnings

import torch

_BENCH = os.path.dirname(os.path.abspath(__file__))
_ROOT = os.path.dirname(_BENCH)
COLUMNS = ("new", "load", "ofi", "jit")


def _models() -> dict:
    from serve_corpus19_models import (AUDIO, BERTISH, DECODER, SEQ2SEQ, VIT, _bbox, _hf_model, _randn, hf_audio,
                                       hf_pixels, hf_text)

    def variant(build, **kwargs):   # the same model, called with extra keyword arguments (output_hidden_states)
        def make():
            model, example, news = build()
            return model, {**example, **kwargs}, [(label, {**inp, **kwargs}) for label, inp in news]
        return make

    def speech2text():
        model = _hf_model("Speech2TextModel", "Speech2TextConfig", dict(
            vocab_size=1000, d_model=64, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
            decoder_attention_heads=4, encoder_ffn_dim=128, decoder_ffn_dim=128, input_feat_per_channel=16,
            conv_channels=32, max_source_positions=64, max_target_positions=64, use_cache=False))
        gen = lambda b, t, s: {"input_features": _randn(b, t, 16, seed=s),   # noqa: E731
                               "decoder_input_ids": torch.randint(3, 1000, (b, 5), generator=torch.Generator().manual_seed(s))}
        return model, gen(1, 40, 1), [("b2", gen(2, 40, 2)), ("b2@t56", gen(2, 56, 3))]

    def ast():
        model = _hf_model("ASTModel", "ASTConfig", dict(num_mel_bins=16, max_length=32, patch_size=8,
                                                        frequency_stride=4, time_stride=4, **VIT))
        return model, {"input_values": _randn(1, 32, 16, seed=1)}, [("b2", {"input_values": _randn(2, 32, 16, seed=2)}),
                                                                    ("b3", {"input_values": _randn(3, 32, 16, seed=3)})]

    def clip_full(cls, cfg, text_cfg, vision_cfg, size=32, extra=None):
        def build():
            import transformers
            config = getattr(transformers, cfg)(text_config=text_cfg, vision_config=vision_cfg, **(extra or {}))
            torch.manual_seed(0)
            model = getattr(transformers, cls)(config).eval()

            def inp(b, s, seed):
                gen = torch.Generator().manual_seed(seed)
                return {"input_ids": torch.randint(3, 1000, (b, s), generator=gen), "pixel_values":
                        _randn(b, 3, size, size, seed=seed)}
            return model, inp(1, 8, 1), [("b2", inp(2, 8, 2)), ("b2@s12", inp(2, 12, 3))]
        return ("hf", build)

    small_text = dict(vocab_size=1000, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                      intermediate_size=128, max_position_embeddings=64)
    small_vision = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
                        image_size=32, patch_size=8)
    m = {
        # encoders
        "xlm_roberta": hf_text("XLMRobertaModel", "XLMRobertaConfig", **BERTISH),
        "camembert": hf_text("CamembertModel", "CamembertConfig", **BERTISH),
        "roformer": hf_text("RoFormerModel", "RoFormerConfig", embedding_size=64, **BERTISH),
        "rembert": hf_text("RemBertModel", "RemBertConfig", input_embedding_size=32, output_embedding_size=32,
                           **BERTISH),
        "nystromformer": hf_text("NystromformerModel", "NystromformerConfig", num_landmarks=4,
                                 segment_means_seq_len=16, **BERTISH),
        "esm": hf_text("EsmModel", "EsmConfig", pad_token_id=1, mask_token_id=2, vocab=33,
                       position_embedding_type="rotary", **{**BERTISH, "vocab_size": 33}),
        "luke": hf_text("LukeModel", "LukeConfig", entity_vocab_size=16, entity_emb_size=32, **BERTISH),
        "xlm": hf_text("XLMModel", "XLMConfig", vocab_size=1000, emb_dim=64, n_layers=2, n_heads=4,
                       max_position_embeddings=64),
        "splinter": hf_text("SplinterModel", "SplinterConfig", **BERTISH),
        "deberta": hf_text("DebertaModel", "DebertaConfig", relative_attention=True, max_relative_positions=16,
                           pos_att_type=["c2p", "p2c"], **BERTISH),
        "lilt": hf_text("LiltModel", "LiltConfig", extra=_bbox, channel_shrink_ratio=4, **BERTISH),
        "xmod": hf_text("XmodModel", "XmodConfig", languages=["en_XX"], default_language="en_XX", **BERTISH),
        "roc_bert": hf_text("RoCBertModel", "RoCBertConfig", pronunciation_vocab_size=50, shape_vocab_size=50,
                            **BERTISH),
        "modernbert": hf_text("ModernBertModel", "ModernBertConfig", vocab_size=1000, hidden_size=64,
                              num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
                              max_position_embeddings=64, local_attention=8, global_attn_every_n_layers=2,
                              pad_token_id=0, bos_token_id=1, eos_token_id=2, cls_token_id=1, sep_token_id=2),
        "ibert": hf_text("IBertModel", "IBertConfig", **BERTISH),
        "bros": hf_text("BrosModel", "BrosConfig", extra=_bbox, **BERTISH),
        "ernie": hf_text("ErnieModel", "ErnieConfig", **BERTISH),
        "yoso": hf_text("YosoModel", "YosoConfig", use_expectation=True, **BERTISH),
        # decoders
        "openai_gpt": hf_text("OpenAIGPTModel", "OpenAIGPTConfig", vocab_size=1000, n_embd=64, n_layer=2, n_head=4,
                              n_positions=64),
        "ctrl": hf_text("CTRLModel", "CTRLConfig", vocab_size=1000, n_embd=64, n_layer=2, n_head=4, dff=128,
                        n_positions=64, use_cache=False),
        "gpt_bigcode": hf_text("GPTBigCodeModel", "GPTBigCodeConfig", vocab_size=1000, n_embd=64, n_layer=2,
                               n_head=4, n_positions=64, use_cache=False),
        "persimmon": hf_text("PersimmonModel", "PersimmonConfig", **{k: v for k, v in DECODER.items()
                                                                   if k != "num_key_value_heads"}),
        "mpt": hf_text("MptModel", "MptConfig", vocab_size=1000, d_model=64, n_layers=2, n_heads=4,
                       max_seq_len=64, use_cache=False),
        "granite": hf_text("GraniteModel", "GraniteConfig", **DECODER),
        "qwen3": hf_text("Qwen3Model", "Qwen3Config", head_dim=16, **DECODER),
        "olmo2": hf_text("Olmo2Model", "Olmo2Config", **DECODER),
        "glm4": hf_text("Glm4Model", "Glm4Config", head_dim=16, pad_token_id=0, **DECODER),
        "helium": hf_text("HeliumModel", "HeliumConfig", head_dim=16, **DECODER),
        "mamba2": hf_text("Mamba2Model", "Mamba2Config", mask=False, vocab_size=1000, hidden_size=64,
                          num_hidden_layers=2, state_size=8, num_heads=8, head_dim=16, n_groups=1, expand=2,
                          chunk_size=8, use_cache=False),
        "falcon_mamba": hf_text("FalconMambaModel", "FalconMambaConfig", mask=False, vocab_size=1000,
                                hidden_size=64, num_hidden_layers=2, state_size=8, use_cache=False),
        "recurrent_gemma": hf_text("RecurrentGemmaModel", "RecurrentGemmaConfig", mask=False, vocab_size=1000,
                                   hidden_size=64, num_hidden_layers=3, num_attention_heads=4,
                                   num_key_value_heads=1, intermediate_size=128, lru_width=64,
                                   attention_window_size=8, use_cache=False),
        "jetmoe": hf_text("JetMoeModel", "JetMoeConfig", vocab_size=1000, hidden_size=64, num_hidden_layers=2,
                          num_key_value_heads=2, kv_channels=16, intermediate_size=128, num_local_experts=4,
                          num_experts_per_tok=2, max_position_embeddings=64, use_cache=False),
        "granitemoe": hf_text("GraniteMoeModel", "GraniteMoeConfig", num_local_experts=4, num_experts_per_tok=2,
                              **DECODER),
        "phimoe": hf_text("PhimoeModel", "PhimoeConfig", num_local_experts=4, num_experts_per_tok=2, **DECODER),
        "cohere2": hf_text("Cohere2Model", "Cohere2Config", sliding_window=8, **DECODER),
        "gemma3_text": hf_text("Gemma3TextModel", "Gemma3TextConfig", head_dim=16, sliding_window=8, **DECODER),
        "smollm3": hf_text("SmolLM3Model", "SmolLM3Config", pad_token_id=0, **DECODER),
        "dbrx": hf_text("DbrxModel", "DbrxConfig", d_model=64, n_heads=4, n_layers=2, max_seq_len=64,
                        vocab_size=1000, attn_config={"kv_n_heads": 2},
                        ffn_config={"ffn_hidden_size": 64, "moe_num_experts": 4, "moe_top_k": 2}, use_cache=False),
        # seq2seq
        "plbart": hf_text("PLBartModel", "PLBartConfig", decoder=True, **SEQ2SEQ),
        "bigbird_pegasus": hf_text("BigBirdPegasusModel", "BigBirdPegasusConfig", decoder=True,
                                   attention_type="original_full", **SEQ2SEQ),
        "umt5": hf_text("UMT5Model", "UMT5Config", decoder=True, vocab_size=1000, d_model=64, d_kv=16, d_ff=128,
                        num_layers=2, num_heads=4, use_cache=False),
        "longt5": hf_text("LongT5Model", "LongT5Config", decoder=True, vocab_size=1000, d_model=64, d_kv=16,
                          d_ff=128, num_layers=2, num_heads=4, local_radius=4, use_cache=False),
        "switch_transformers": hf_text("SwitchTransformersModel", "SwitchTransformersConfig", decoder=True,
                                       vocab_size=1000, d_model=64, d_kv=16, d_ff=128, num_layers=2,
                                       num_sparse_encoder_layers=1, num_sparse_decoder_layers=1, num_heads=4,
                                       num_experts=4, use_cache=False),
        "fsmt": hf_text("FSMTModel", "FSMTConfig", decoder=True, langs=["en", "de"], src_vocab_size=1000,
                        tgt_vocab_size=1000, d_model=64, encoder_layers=2, decoder_layers=2,
                        encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=128,
                        decoder_ffn_dim=128, max_position_embeddings=64, use_cache=False),
        "speech2text": ("hf", speech2text),
        # vision
        "cvt": hf_pixels("CvtModel", "CvtConfig", 64, 96, embed_dim=[16, 32, 64], num_heads=[1, 2, 4],
                         depth=[1, 1, 1]),
        "poolformer": hf_pixels("PoolFormerModel", "PoolFormerConfig", hidden_sizes=[16, 32, 64, 128],
                                depths=[1, 1, 1, 1]),
        "regnet_hf": hf_pixels("RegNetModel", "RegNetConfig", hidden_sizes=[16, 32, 64, 128], depths=[1, 1, 1, 1],
                               embedding_size=16, groups_width=8),
        "vit_msn": hf_pixels("ViTMSNModel", "ViTMSNConfig", 64, None, image_size=64, patch_size=8, **VIT),
        "swiftformer": hf_pixels("SwiftFormerModel", "SwiftFormerConfig", depths=[1, 1, 1, 1],
                                 embed_dims=[16, 32, 48, 64]),
        "mobilenet_v1_hf": hf_pixels("MobileNetV1Model", "MobileNetV1Config", depth_multiplier=0.25),
        "pvt": hf_pixels("PvtModel", "PvtConfig", 64, None, image_size=64, hidden_sizes=[16, 32, 64, 128],
                         depths=[1, 1, 1, 1]),
        "pvt_v2": hf_pixels("PvtV2Model", "PvtV2Config", hidden_sizes=[16, 32, 64, 128], depths=[1, 1, 1, 1]),
        "dinov2_registers": hf_pixels("Dinov2WithRegistersModel", "Dinov2WithRegistersConfig", image_size=64,
                                      patch_size=8, num_register_tokens=2, **VIT),
        "ijepa": hf_pixels("IJepaModel", "IJepaConfig", 64, None, image_size=64, patch_size=8, **VIT),
        "vitdet": hf_pixels("VitDetModel", "VitDetConfig", 64, None, image_size=64, patch_size=8,
                            pretrain_image_size=64, **VIT),
        "swin2sr": hf_pixels("Swin2SRModel", "Swin2SRConfig", 32, 48, image_size=32, patch_size=1, embed_dim=16,
                             depths=[1, 1], num_heads=[2, 2], window_size=4),
        "textnet": hf_pixels("TextNetModel", "TextNetConfig"),
        "hgnet_v2": hf_pixels("HGNetV2Backbone", "HGNetV2Config"),
        "detr": hf_pixels("DetrModel", "DetrConfig", 64, 96, use_timm_backbone=False, use_pretrained_backbone=False,
                          backbone_config={"model_type": "resnet", "hidden_sizes": [16, 32, 64, 128],
                                           "depths": [1, 1, 1, 1], "embedding_size": 16,
                                           "out_features": ["stage4"]},
                          d_model=32, encoder_layers=1, decoder_layers=1, encoder_attention_heads=2,
                          decoder_attention_heads=2, encoder_ffn_dim=64, decoder_ffn_dim=64, num_queries=5),
        "sam_vision": hf_pixels("SamVisionModel", "SamVisionConfig", 64, None, image_size=64, patch_size=8,
                                hidden_size=64, num_hidden_layers=2, num_attention_heads=4, output_channels=32,
                                global_attn_indexes=[1], window_size=4, mlp_dim=128),
        "ast": ("hf", ast),
        # audio
        "sew_d": hf_audio("SEWDModel", "SEWDConfig", squeeze_factor=2, position_buckets=16, max_position_embeddings=64,
                          **AUDIO),
        "unispeech_sat": hf_audio("UniSpeechSatModel", "UniSpeechSatConfig", **AUDIO),
        # multimodal
        "clip": clip_full("CLIPModel", "CLIPConfig", dict(small_text), dict(small_vision)),
        "siglip": clip_full("SiglipModel", "SiglipConfig", dict(small_text), dict(small_vision)),
        "owlvit": clip_full("OwlViTModel", "OwlViTConfig", dict(small_text), dict(small_vision)),
        "groupvit": clip_full("GroupViTModel", "GroupViTConfig", dict(small_text), dict(
            hidden_size=64, num_hidden_layers=2, depths=[1, 1], num_group_tokens=[4, 0], num_output_groups=[4, 4],
            num_attention_heads=4, intermediate_size=128, image_size=32, patch_size=8), extra={"projection_dim": 32}),
        # the two refusals of session 28, and output capturing
        "swin_hidden_fresh": hf_pixels("SwinModel", "SwinConfig", 32, 48, image_size=32, patch_size=4,
                                       embed_dim=24, depths=[1, 1], num_heads=[2, 4], window_size=4),
        "w2v2_conformer_rotary": hf_audio("Wav2Vec2ConformerModel", "Wav2Vec2ConformerConfig",
                                          position_embeddings_type="rotary", conv_depthwise_kernel_size=7, **AUDIO),
    }
    m["swin_hidden_fresh"] = ("hf", variant(m["swin_hidden_fresh"][1], output_hidden_states=True))
    for name in ("roformer", "modernbert", "qwen3", "pvt_v2", "deberta"):
        m[f"{name}_hidden"] = ("hf", variant(m[name][1], output_hidden_states=True))
    return m


def _warm(name: str) -> bool:
    return name.endswith("_rotary")   # traced after an eager call at the example's shape


def run_one(name: str) -> dict:
    import tracejit
    from serve_corpus19 import _call, _error, _scale, _short
    row = {"model": name, "err": {}, "notes": []}
    t0 = time.time()
    torch.manual_seed(0)
    try:
        model, example, news = _models()[name][1]()
        with torch.no_grad():
            wants = [_call(model, inp) for _, inp in news]
    except Exception as exc:  # noqa: BLE001
        row["trace"] = "eager: " + _short(exc, 300)
        return row
    row["scale"] = max(_scale(w) for w in wants)
    kw = isinstance(example, dict)

    def attempt(col, make):
        try:
            with torch.no_grad():
                fn = make()
                row["err"][col] = max(_error(_call(fn, inp), want) for (_, inp), want in zip(news, wants))
        except Exception as exc:  # noqa: BLE001
            row["err"][col] = _short(exc, 300)

    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if _warm(name):
            _call(model, example)
        try:
            traced = (tracejit.trace(model, example_kwarg_inputs=example, strict=False) if kw
                      else tracejit.trace(model, example, strict=False))
            row["trace"] = "ok"
        except Exception as exc:  # noqa: BLE001
            row["trace"] = _short(exc, 500)
            traced = None
        if traced is not None:
            buf = io.BytesIO()
            try:
                tracejit.save(traced, buf)
            except Exception as exc:  # noqa: BLE001
                buf = None
                row["err"]["load"] = "save: " + _short(exc, 300)

            def load():
                buf.seek(0)
                return tracejit.load(buf)
            attempt("new", lambda: traced)
            if buf is not None:
                attempt("load", load)
            attempt("ofi", lambda: tracejit.optimize_for_inference(traced))
        fresh = _models()[name][1]()[0]   # torch.jit on its own fresh copy (same seed: same weights)
        if _warm(name):
            _call(fresh, example)
        attempt("jit", lambda: torch.jit.trace(fresh, example_kwarg_inputs=example, strict=False) if kw
                else torch.jit.trace(fresh, example, strict=False))
    bound = 1e-4 * max(1.0, row["scale"])
    row["wrong"] = [c for c in COLUMNS[:3] if isinstance(row["err"].get(c), float) and row["err"][c] > bound]
    row["seconds"] = round(time.time() - t0, 1)
    return row


def _fmt(v) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return "0" if v == 0 else f"{v:.1e}"
    return "GuardError" if v.startswith("GuardError") else "refused" if "TraceError" in v else "FAIL"


def render(rows: list[dict]) -> str:
    lines = ["| model | trace | " + " | ".join(COLUMNS) + " | wrong |", "|" + "---|" * (len(COLUMNS) + 3)]
    notes = []
    for r in rows:
        trace = "ok" if r.get("trace") == "ok" else "FAIL"
        lines.append(f"| {r['model']} | {trace} | " + " | ".join(_fmt(r["err"].get(c)) for c in COLUMNS) +
                     f" | {', '.join(r.get('wrong', [])) or '-'} |")
        if r.get("trace") != "ok":
            notes.append(f"- {r['model']} trace: {r.get('trace')}")
        notes += [f"- {r['model']} {c}: {v}" for c, v in r["err"].items() if isinstance(v, str)]
    return "\n".join(lines + ([""] + notes if notes else []))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--models")
    ap.add_argument("--one")
    ap.add_argument("--rows")
    ap.add_argument("--from-rows")
    ap.add_argument("--timeout", type=float, default=600)
    a = ap.parse_args(argv)
    if a.one:
        print(json.dumps(run_one(a.one)), flush=True)
        return 0
    if a.from_rows:
        rows = {}
        for line in open(a.from_rows):
            r = json.loads(line)
            rows[r["model"]] = r
        print(render(list(rows.values())))
        return 0
    names = a.models.split(",") if a.models else list(_models())
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=os.pathsep.join([_ROOT, _BENCH]))
    rows = []
    for name in names:
        try:
            proc = subprocess.run([sys.executable, __file__, "--one", name], env=env, cwd=_ROOT, capture_output=True,
                                  text=True, timeout=a.timeout)
            last = proc.stdout.strip().splitlines()[-1:] or [""]
            row = json.loads(last[0]) if last[0].startswith("{") else {
                "model": name, "err": {}, "trace": "crashed: " + proc.stderr.strip()[-300:]}
        except subprocess.TimeoutExpired:
            row = {"model": name, "err": {}, "trace": f"timeout {a.timeout:.0f}s"}
        rows.append(row)
        print(f"{name}: {row.get('trace')[:100]} {row['err']} wrong={row.get('wrong')} {row.get('seconds')}s",
              file=sys.stderr, flush=True)
        if a.rows:
            with open(a.rows, "a") as fh:
                fh.write(json.dumps(row) + "\n")
    print(render(rows))
    return 0


if __name__ == "__main__":
    for _p in (_ROOT, _BENCH):
        if _p not in sys.path:
            sys.path.insert(0, _p)
    sys.exit(main())
