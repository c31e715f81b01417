"""Byte-level BPE tokenizer for the tiny models, with a ChatML chat template.

Trained on the project corpus (``engine.prompts.corpus``) plus the instruction phrases
and the padding units the residue planner may pick, so that:

* every padding candidate the planner tries first (`` ~``) is ONE token and adds exactly
  one templated token per repetition, in context (checked by ``check_tokenizer``);
* the pre-tokenizer is Qwen2's (digits split one by one, NFC normaliser, byte-level
  with ``use_regex=False``): transformers' ``Qwen2Tokenizer`` rebuilds exactly this
  pipeline when it loads a ``qwen3_5``/``qwen3`` checkpoint, so the server (vLLM, via
  transformers) and the harness's local ``ChatTokenizer`` (``tokenizers`` + Jinja)
  count the same templated length. (shared/gpu/README.md: with a GPT-2 style
  pre-tokenizer, transformers re-split `` 3`` into two tokens.)
"""
from __future__ import annotations

import json
import random
from pathlib import Path

from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

from engine.prompts.corpus import document_lines
from engine.prompts.planner import INSTRUCTION, PAD_CANDIDATES, WARMUP_ASSISTANT, WARMUP_FOLLOWUP

VOCAB_SIZE = 4096
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
EOS = "<|im_end|>"
PAD = "<|endoftext|>"
# Qwen2's pre-tokenizer regex (as in Qwen2/Qwen3/Qwen3.5 tokenizer.json files).
QWEN2_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                 r"|\s*[\r\n]+|\s+(?!\S)|\s+")

CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


def _training_texts(seed: int = 12345, docs: int = 400) -> list[str]:
    rng = random.Random(seed)
    texts: list[str] = []
    for i in range(docs):
        lines = document_lines(60, 100_000 + i)
        texts.append("\n".join(lines) + "\n")
    for n in range(0, 10):
        texts.extend([INSTRUCTION.format(n=n)] * 50)
    texts.extend([WARMUP_ASSISTANT, WARMUP_FOLLOWUP] * 20)
    for unit in PAD_CANDIDATES:  # padding runs: each unit must become one token
        for _ in range(40):
            texts.append("\n" + unit * rng.randint(1, 130))
    texts.extend(["user\n", "assistant\n", "system\n"] * 50)
    return texts


def build_tokenizer(vocab_size: int = VOCAB_SIZE) -> Tokenizer:
    tok = Tokenizer(models.BPE(unk_token=None, fuse_unk=False, byte_fallback=False))
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)
    trainer = trainers.BpeTrainer(vocab_size=vocab_size - len(SPECIAL_TOKENS), min_frequency=2,
                                  special_tokens=[],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(_training_texts(), trainer=trainer)
    tok.add_special_tokens(SPECIAL_TOKENS)  # ids vocab_size-3 .. vocab_size-1
    return tok


def tokenizer_config(tok: Tokenizer) -> dict:
    added = {str(tok.token_to_id(t)): {"content": t, "lstrip": False, "normalized": False,
                                       "rstrip": False, "single_word": False, "special": True}
             for t in SPECIAL_TOKENS}
    return {
        "add_bos_token": False,
        "add_prefix_space": False,
        "added_tokens_decoder": added,
        "bos_token": None,
        "chat_template": CHAT_TEMPLATE,
        "clean_up_tokenization_spaces": False,
        "eos_token": EOS,
        "errors": "replace",
        "model_max_length": 32768,
        "pad_token": PAD,
        "split_special_tokens": False,
        "tokenizer_class": "Qwen2Tokenizer",
        "unk_token": None,
    }


def save_tokenizer(tok: Tokenizer, out_dir: str | Path) -> Path:
    d = Path(out_dir)
    d.mkdir(parents=True, exist_ok=True)
    tok.save(str(d / "tokenizer.json"))
    (d / "tokenizer_config.json").write_text(json.dumps(tokenizer_config(tok), indent=2) + "\n")
    # vocab.json/merges.txt too: Qwen2Tokenizer (slow/fast) may be built from them.
    model = json.loads(tok.to_str())["model"]
    (d / "vocab.json").write_text(json.dumps(model["vocab"], ensure_ascii=False))
    merges = model["merges"]
    (d / "merges.txt").write_text("#version: 0.2\n" + "\n".join(
        m if isinstance(m, str) else " ".join(m) for m in merges) + "\n")
    return d


def special_ids(tok: Tokenizer) -> dict[str, int]:
    return {t: tok.token_to_id(t) for t in SPECIAL_TOKENS}


def check_tokenizer(model_dir: str | Path) -> dict:
    """Plan a few residues with the harness's own planner and return what it picked."""
    from engine.prompts import ChatTokenizer, plan
    ct = ChatTokenizer.from_dir(model_dir)
    plans = plan(ct.count_many, [0, 3, 4, 5, 60, 127], context=1200, modulus=128, verify=True)
    cal_unit = None
    from engine.prompts.planner import calibrate
    cal_unit = calibrate(ct.count_many, 1200, 128).pad_unit
    return {"pad_unit": cal_unit, "targets": [p.target_len for p in plans]}
