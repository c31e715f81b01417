"""engine.tinymodel on CPU: tokenizer + ChatML template, harness-shaped data, and the
checkpoint layout vLLM 0.26.0 serves. Torch/transformers parts skip cleanly when absent."""
from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from tests._vllm import missing, require_module

from engine.tinymodel import data as D
from engine.tinymodel.models import DENSE, HYBRID_TEXT, VOCAB, serving_config, \
    serving_weight_name, training_weight_name
from engine.prompts import ChatTokenizer, plan
from engine.prompts.planner import calibrate, prompt_content

TOK_DIR = Path(__file__).resolve().parents[2] / "engine" / "tinymodel" / "tokenizer"


@pytest.fixture(scope="module")
def ct() -> ChatTokenizer:
    return ChatTokenizer.from_dir(TOK_DIR)


def test_chatml_template_and_round_trip(ct):
    msgs = [{"role": "user", "content": "Reproduce the first 3 lines.\n\nA quiet heron.\n ~ ~"}]
    text = ct.render(msgs)
    assert text == ("<|im_start|>user\nReproduce the first 3 lines.\n\nA quiet heron.\n ~ ~"
                    "<|im_end|>\n<|im_start|>assistant\n")
    assert ct.render(msgs, add_generation_prompt=False).endswith("<|im_end|>\n")
    ids = ct.encode_text(text)
    assert ct.tokenizer.decode(ids, skip_special_tokens=False) == text
    for special in ("<|im_start|>", "<|im_end|>", "<|endoftext|>"):
        assert ct.tokenizer.encode(special, add_special_tokens=False).ids == \
            [ct.tokenizer.token_to_id(special)]
    assert ct.special["eos_token"] == "<|im_end|>"
    assert ct.tokenizer.get_vocab_size() <= VOCAB


def test_qwen_style_digits_and_padding_units(ct):
    # Digits are split one by one (Qwen2 pre-tokenizer), so transformers' Qwen tokenizer
    # classes and the local tokenizers pipeline agree on " 3".
    assert ct.tokenizer.encode(" 3", add_special_tokens=False).tokens == ["Ġ", "3"]
    for unit in (" ~", " the"):
        assert len(ct.encode_text(unit)) == 1
        assert len(ct.encode_text("heron.\n" + unit * 40)) == len(ct.encode_text("heron.\n")) + 40


def test_planner_uses_tilde_and_hits_every_residue(ct):
    assert calibrate(ct.count_many, 1200, 128).pad_unit == " ~"
    plans = plan(ct.count_many, [0, 3, 4, 5, 60, 127], context=1200, modulus=128, verify=True)
    assert [p.target_len % 128 for p in plans] == [0, 3, 4, 5, 60, 127]


@pytest.mark.slow
def test_committed_tokenizer_is_reproducible(tmp_path):
    from engine.tinymodel.tokenizer import build_tokenizer, save_tokenizer
    save_tokenizer(build_tokenizer(), tmp_path)
    for f in ("tokenizer.json", "tokenizer_config.json"):
        assert (tmp_path / f).read_text() == (TOK_DIR / f).read_text()


def test_training_samples_have_the_harness_prompt_shape(ct):
    rng = random.Random(1)
    eos = ct.tokenizer.token_to_id("<|im_end|>")
    for _ in range(20):
        s = D.make_sample(rng, max_lines=30, max_pad=130)
        lines = D.doc_lines(s.seed, s.doc_lines)
        assert s.messages[0]["content"] == prompt_content(lines, s.n, s.pad_unit, s.pad_count)
        assert s.answer == "\n".join(lines[:s.n])
        ids, plen = D.encode(ct, [s], eos)[0]
        assert plen == ct.count(s.messages)
        assert ids[-1] == eos
        assert ct.tokenizer.decode(ids[plen:-1]) == s.answer
        assert D.TRAIN_SEEDS[0] <= s.seed < D.TRAIN_SEEDS[1]


def test_doc_lines_match_corpus():
    from engine.prompts.corpus import document_lines
    assert D.doc_lines(104, 50) == document_lines(50, 104)


def test_hybrid_serving_config_matches_vllm_026_expectations(ct):
    eos, pad = ct.tokenizer.token_to_id("<|im_end|>"), ct.tokenizer.token_to_id("<|endoftext|>")
    cfg = serving_config("hybrid", dict(HYBRID_TEXT), eos_id=eos, pad_id=pad)
    assert cfg["architectures"] == ["Qwen3_5ForConditionalGeneration"]
    assert cfg["model_type"] == "qwen3_5"
    tc = cfg["text_config"]
    assert tc["model_type"] == "qwen3_5_text"
    assert tc["layer_types"] == ["linear_attention", "linear_attention", "full_attention"] * 2
    assert tc["num_hidden_layers"] == len(tc["layer_types"]) and tc["hidden_size"] == 256
    rope = tc["rope_parameters"]
    rotary_dim = int(tc["head_dim"] * rope["partial_rotary_factor"])
    assert sum(rope["mrope_section"]) == rotary_dim // 2  # vLLM's MRotaryEmbedding asserts it
    assert tc["linear_num_value_heads"] % tc["linear_num_key_heads"] == 0
    assert tc["eos_token_id"] == eos and cfg["eos_token_id"] == eos
    assert tc["vocab_size"] >= ct.tokenizer.get_vocab_size()
    assert cfg["vision_config"]["out_hidden_size"] == tc["hidden_size"]
    assert cfg["tie_word_embeddings"] is False and tc["tie_word_embeddings"] is False
    for k in ("image_token_id", "video_token_id", "vision_start_token_id", "vision_end_token_id"):
        assert ct.tokenizer.get_vocab_size() <= cfg[k] < tc["vocab_size"]


def test_dense_serving_config(ct):
    cfg = serving_config("dense", dict(DENSE), eos_id=1, pad_id=0)
    assert cfg["architectures"] == ["Qwen3ForCausalLM"] and cfg["model_type"] == "qwen3"
    assert "text_config" not in cfg and cfg["tie_word_embeddings"] is False


def test_weight_renaming():
    assert serving_weight_name("hybrid", "model.layers.0.linear_attn.A_log") == \
        "model.language_model.layers.0.linear_attn.A_log"
    assert serving_weight_name("hybrid", "lm_head.weight") == "lm_head.weight"
    assert serving_weight_name("dense", "model.norm.weight") == "model.norm.weight"
    for v in ("hybrid", "dense"):
        n = "model.layers.2.self_attn.q_proj.weight"
        assert training_weight_name(v, serving_weight_name(v, n)) == n


# ----------------------------------------------------------------------- torch + transformers
def _need_torch():
    require_module("torch")
    tf = require_module("transformers")
    if not hasattr(tf, "Qwen3_5ForCausalLM"):
        missing(f"transformers {tf.__version__} has no Qwen3.5")


# Parameter-name pieces vLLM 0.26.0's Qwen3_5 loader maps (qwen3_5.py hf_to_vllm_mapper:
# in_proj_qkv/z -> in_proj_qkvz, in_proj_b/a -> in_proj_ba; qwen3_vl prefix mapper:
# model.language_model. -> language_model.model., lm_head. -> language_model.lm_head.).
GDN_PARAMS = {"in_proj_qkv.weight", "in_proj_z.weight", "in_proj_b.weight", "in_proj_a.weight",
              "conv1d.weight", "A_log", "dt_bias", "norm.weight", "out_proj.weight"}
ATTN_PARAMS = {"q_proj.weight", "k_proj.weight", "v_proj.weight", "o_proj.weight",
               "q_norm.weight", "k_norm.weight"}


@pytest.mark.slow
@pytest.mark.parametrize("variant", ["hybrid", "dense"])
def test_saved_layout_names_and_reload(variant, tmp_path):
    _need_torch()
    import torch
    from safetensors import safe_open
    from engine.tinymodel.layout import load_served, save_served
    from engine.tinymodel.train import build_model
    torch.manual_seed(0)
    model = build_model(variant)
    out = save_served(model, variant, TOK_DIR, tmp_path / variant)
    with safe_open(str(out / "model.safetensors"), "pt") as f:
        names = set(f.keys())
        assert all(f.get_tensor(n).dtype == torch.bfloat16 for n in names)
    prefix = "model.language_model." if variant == "hybrid" else "model."
    assert "lm_head.weight" in names and f"{prefix}embed_tokens.weight" in names
    assert all(n == "lm_head.weight" or n.startswith(prefix) for n in names)
    cfg = json.loads((out / "config.json").read_text())
    layer_types = cfg["text_config"]["layer_types"] if variant == "hybrid" else \
        ["full_attention"] * cfg["num_hidden_layers"]
    for i, kind in enumerate(layer_types):
        mixer, want = ("linear_attn", GDN_PARAMS) if kind == "linear_attention" else \
            ("self_attn", ATTN_PARAMS)
        have = {n.split(f"layers.{i}.{mixer}.", 1)[1] for n in names
                if f"layers.{i}.{mixer}." in n}
        assert have == want, (i, kind)
    from transformers import AutoConfig
    hf = AutoConfig.from_pretrained(out)
    assert hf.model_type == cfg["model_type"]
    back = load_served(out)
    x = torch.tensor([ChatTokenizer.from_dir(out).encode_text("A quiet heron.")])
    with torch.no_grad():
        a = model.to(torch.bfloat16)(input_ids=x).logits
        b = back(input_ids=x).logits
    assert torch.equal(a, b)


def test_answer_stats_on_a_tiny_batch():
    _need_torch()
    import torch
    from engine.tinymodel.train import answer_stats, build_model
    torch.manual_seed(0)
    model = build_model("dense")
    ids = torch.randint(0, 800, (2, 12))
    tm = torch.zeros_like(ids, dtype=torch.bool)
    tm[:, 8:] = True
    loss, em, worst = answer_stats(model, ids, tm)
    assert loss.ndim == 0 and em.shape == (2,) and worst.shape == (2,)
    assert ((worst > 0).float() == em).all()


@pytest.mark.slow
def test_training_goes_on_from_a_served_checkpoint(tmp_path):
    """--init: the served bf16 weights are the starting point, training starts at the
    requested curriculum stage, and a checkpoint of the other variant is refused."""
    _need_torch()
    import torch
    from engine.tinymodel import data as D
    from engine.tinymodel.layout import load_served, save_served
    from engine.tinymodel.train import build_model, train
    torch.manual_seed(1)
    src = save_served(build_model("dense"), "dense", TOK_DIR, tmp_path / "dense")
    init = load_served(src, dtype=torch.float32).state_dict()
    same, info = train("dense", str(TOK_DIR), time_cap=0.0, init_dir=str(src), start_stage=4,
                       workers=1, tokens_per_batch=2048, log=lambda m: None)
    assert info["steps"] == 0 and info["init_from"] == str(src) and info["start_stage"] == 4
    assert all(torch.equal(v, same.state_dict()[k]) for k, v in init.items())
    logs: list[str] = []
    moved, info = train("dense", str(TOK_DIR), time_cap=1.0, init_dir=str(src), start_stage=4,
                        workers=1, tokens_per_batch=2048, lr=1e-3, warmup=1, log=logs.append)
    first = json.loads(logs[0])
    assert info["steps"] >= 1 and first["stage"] == 4
    assert first["max_tokens"] == D.STAGES[4][0]
    assert any(not torch.equal(v, moved.state_dict()[k]) for k, v in init.items())
    with pytest.raises(ValueError, match="dense model, not hybrid"):
        train("hybrid", str(TOK_DIR), time_cap=0.0, init_dir=str(src), workers=1)


WEIGHTS = TOK_DIR.parent / "weights" / "hybrid"


def test_committed_hybrid_layout_and_record():
    """The committed weights are the served layout (what `sweep --engine vllm --model` takes)
    with the tokenizer the harness plans with, and their training record says they passed
    the harness-plan check the H200 sweeps relied on."""
    from engine.tinymodel.layout import variant_of
    assert variant_of(WEIGHTS) == "hybrid"
    for f in ("tokenizer.json", "vocab.json", "merges.txt"):  # tokenizer_config: max length lifted
        assert (WEIGHTS / f).read_bytes() == (TOK_DIR / f).read_bytes()
    cfg = json.loads((WEIGHTS / "config.json").read_text())
    assert cfg["text_config"]["max_position_embeddings"] >= 245_760
    info = json.loads((WEIGHTS / "training.json").read_text())
    check = info["final_check_bf16"]
    assert check["harness_seeds_exact"] == [0, 1, 2, 3, 4, 5]
    assert check["harness_ctx1200_seed0"]["worst_margin_min"] > 5


@pytest.mark.slow
def test_committed_hybrid_copies_harness_plans_on_cpu():
    """Re-run part of that check here, on CPU with transformers: the harness's own plans
    (context 1,200, seed 0) at residues 3, 4, 5 (k, k+1, k+2 for ngram k=3) are reproduced
    exactly, teacher-forced, with a clear worst-token margin; real greedy decoding of one
    of them gives the expected passage."""
    _need_torch()
    import torch
    from engine.tinymodel.layout import load_served
    from engine.tinymodel.train import answer_stats
    model = load_served(WEIGHTS, dtype=torch.float32).eval()
    chat = ChatTokenizer.from_dir(WEIGHTS)
    eos = chat.tokenizer.token_to_id("<|im_end|>")
    plans = plan(chat.count_many, [3, 4, 5], context=1200, modulus=128, seed=0, verify=True)
    assert [p.target_len % 128 for p in plans] == [3, 4, 5]
    rows = [chat.encode_text(chat.render(p.messages)) for p in plans]
    seqs = [r + chat.encode_text(p.expected) + [eos] for r, p in zip(rows, plans)]
    T = max(map(len, seqs))
    ids = torch.full((3, T), eos, dtype=torch.long)
    tm = torch.zeros((3, T), dtype=torch.bool)
    for i, (r, s) in enumerate(zip(rows, seqs)):
        ids[i, :len(s)] = torch.tensor(s)
        tm[i, len(r):len(s)] = True
    with torch.no_grad():
        _, em, worst = answer_stats(model, ids, tm)
    assert em.tolist() == [1.0, 1.0, 1.0]
    assert worst.min().item() > 3.0
    prompt = torch.tensor([rows[1]])
    with torch.no_grad():
        out = model.generate(prompt, max_new_tokens=80, do_sample=False, eos_token_id=eos,
                             pad_token_id=eos)
    gen = out[0, prompt.shape[1]:].tolist()
    assert eos in gen
    assert chat.tokenizer.decode(gen[:gen.index(eos)], skip_special_tokens=False) == plans[1].expected
