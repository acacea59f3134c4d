"""Tiny BERT, GPT-2, ViT and T5 built from config and saved with ``save_pretrained``, each with the
tokenizer (a ``tokenizers`` WordLevel model over a 100-word vocabulary) a server would load next
to it (ViT's image processor needs PIL, not installed: its requests are normalized here as
ViTImageProcessor does). No network: every file is written here.

Also the requests a server meets: tokenizer-style dicts of ``n`` words per text, at any batch size,
padded when the texts differ in length (``requests``). Used by tests/serve in the test process and
in the fresh process that loads the saved programs (serve_child.py)."""
from __future__ import annotations

import os

import numpy as np
import torch

import transformers

WORDS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [f"w{i}" for i in range(95)]
NAMES = ("bert", "gpt2", "vit", "t5")
INPUT_NAMES = {"bert": ["input_ids", "token_type_ids", "attention_mask"],
               "gpt2": ["input_ids", "attention_mask"], "t5": ["input_ids", "attention_mask"]}
IMAGE = 32
# what a tokenizer may be told not to return, where the model's forward has a default for it
OMITTABLE = {"bert": [("token_type_ids",), ("attention_mask",), ("token_type_ids", "attention_mask")],
             "gpt2": [("attention_mask",)], "t5": [("attention_mask",)], "vit": []}


def tokenizer(name: str):
    """A fast tokenizer over WORDS (whitespace split, no special tokens added)."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(WORDS)}, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return transformers.PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", pad_token="[PAD]",
                                                model_input_names=INPUT_NAMES[name])


def build(name: str):
    """The eval-mode model ``name`` with seeded weights."""
    torch.manual_seed(0)
    if name == "bert":
        cfg = transformers.BertConfig(vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                      intermediate_size=64, max_position_embeddings=64, pad_token_id=0,
                                      initializer_range=0.2, architectures=["BertModel"])
        return transformers.BertModel(cfg).eval()
    if name == "gpt2":
        cfg = transformers.GPT2Config(vocab_size=100, n_embd=32, n_layer=2, n_head=4, n_positions=64, bos_token_id=1,
                                      eos_token_id=2, pad_token_id=0, initializer_range=0.2, use_cache=False,
                                      architectures=["GPT2LMHeadModel"])
        return transformers.GPT2LMHeadModel(cfg).eval()
    if name == "vit":
        cfg = transformers.ViTConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
                                     image_size=IMAGE, patch_size=8, num_channels=3, architectures=["ViTModel"])
        return transformers.ViTModel(cfg).eval()
    cfg = transformers.T5Config(vocab_size=100, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_decoder_layers=2,
                                num_heads=4, relative_attention_num_buckets=8, pad_token_id=0, eos_token_id=1,
                                decoder_start_token_id=0, use_cache=False, architectures=["T5ForConditionalGeneration"])
    return transformers.T5ForConditionalGeneration(cfg).eval()


def save(name: str, directory: str) -> str:
    """``save_pretrained`` the model and its tokenizer / image processor into ``directory``."""
    os.makedirs(directory, exist_ok=True)
    build(name).save_pretrained(directory)
    if name != "vit":   # ViTImageProcessor needs PIL and torchvision, not installed: requests() normalizes
        tokenizer(name).save_pretrained(directory)
    return directory


def texts(batch: int, lengths, seed: int) -> list[str]:
    """``batch`` texts whose word counts cycle through ``lengths``."""
    rng = np.random.default_rng(seed)
    lengths = list(lengths)
    return [" ".join(f"w{int(i)}" for i in rng.integers(0, 95, lengths[b % len(lengths)])) for b in range(batch)]


def request(name: str, directory: str, batch: int, lengths, seed: int, omit=(), decoder_lengths=None) -> dict:
    """What a client sends: the tokenizer's (processor's) dict, all keys, padded where lengths differ;
    T5 also gets ``decoder_input_ids`` (the target text's ids, one word shorter). ``omit``: keys the
    tokenizer is told not to return (``return_token_type_ids=False``, ``return_attention_mask=False``).
    ``decoder_lengths``: T5's target word counts (default: one word shorter than each text; a
    generation step sends 1 whatever the encoder's length)."""
    if name == "vit":
        rng = np.random.default_rng(seed)   # what ViTImageProcessor gives: (pixel / 255 - 0.5) / 0.5, channels first
        images = rng.uniform(0, 255, (batch, 3, IMAGE, IMAGE)).astype(np.float32)
        return {"pixel_values": torch.from_numpy((images / 255 - 0.5) / 0.5)}
    tok = transformers.AutoTokenizer.from_pretrained(directory)
    flags = {f"return_{key}": False for key in omit}
    out = dict(tok(texts(batch, lengths, seed), padding=True, return_tensors="pt", **flags))
    assert not set(omit) & set(out), (omit, list(out))
    if name == "t5":
        targets = texts(batch, decoder_lengths or [max(1, n - 1) for n in lengths], seed + 1)
        out["decoder_input_ids"] = tok(targets, padding=True, return_tensors="pt")["input_ids"]
    return out
