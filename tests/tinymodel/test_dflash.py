"""The DFlash drafter on CPU: the checkpoint layout vLLM's DFlash loader reads (names,
shapes, config), the block attention the mirror computes, the acceptance walk, and a
few training steps against the committed hybrid. Torch parts skip cleanly when absent;
the vLLM parts use the installed vLLM's own mapper, registry and config classes."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tests._vllm import missing, require_module, require_vllm

from engine.tinymodel.dflash_train import acceptance, make_blocks

ROOT = Path(__file__).resolve().parents[2]
HYBRID = ROOT / "engine" / "tinymodel" / "weights" / "hybrid"
TOK_DIR = ROOT / "engine" / "tinymodel" / "tokenizer"

# What DFlashQwen3Model (vllm/model_executor/models/qwen3_dflash.py, 0.26.0) registers per
# draft layer after its WeightsMapper stacks q/k/v -> qkv_proj and gate/up -> gate_up_proj,
# plus fc (input hidden x len(target_layer_ids)), hidden_norm and norm. embed_tokens and
# lm_head are left out of the checkpoint so the proposer shares the target's.
VLLM_LAYER_PARAMS = ("input_layernorm.weight", "post_attention_layernorm.weight",
                     "self_attn.qkv_proj.weight", "self_attn.o_proj.weight",
                     "self_attn.q_norm.weight", "self_attn.k_norm.weight",
                     "mlp.gate_up_proj.weight", "mlp.down_proj.weight")


def _vllm_param_shapes(cfg: dict) -> dict[str, tuple[int, ...]]:
    h, hd, inter = cfg["hidden_size"], cfg["head_dim"], cfg["intermediate_size"]
    nh, nkv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    shapes = {"input_layernorm.weight": (h,), "post_attention_layernorm.weight": (h,),
              "self_attn.qkv_proj.weight": ((nh + 2 * nkv) * hd, h),
              "self_attn.o_proj.weight": (h, nh * hd), "self_attn.q_norm.weight": (hd,),
              "self_attn.k_norm.weight": (hd,), "mlp.gate_up_proj.weight": (2 * inter, h),
              "mlp.down_proj.weight": (h, inter)}
    out = {f"layers.{i}.{n}": shapes[n] for i in range(cfg["num_hidden_layers"])
           for n in VLLM_LAYER_PARAMS}
    n_feat = len(cfg["dflash_config"]["target_layer_ids"])
    out.update({"fc.weight": (h, h * n_feat), "hidden_norm.weight": (h,), "norm.weight": (h,)})
    return out


# ----------------------------------------------------------------------------- no torch
def test_acceptance_walk_follows_vllm_steps():
    spans = [(10, 20)]  # answer positions 10..19, eos at 19
    anchors = np.arange(10, 19)[None]
    valid = np.ones_like(anchors, bool)
    # every draft right: step at 10 accepts 7 (-> 11..17, bonus 18), step at 18 accepts 1 (eos)
    assert acceptance(np.full((1, 9), 7), anchors, valid, spans) == (8, 2)
    # nothing right: one token per step from 10 to 18
    assert acceptance(np.zeros((1, 9), int), anchors, valid, spans) == (0, 9)
    # 2 right at 10 -> next bonus at 13; 0 there; 7 at 14 -> capped by the 5 tokens left
    acc = np.zeros((1, 9), int)
    acc[0, 0], acc[0, 4] = 2, 7
    assert acceptance(acc, anchors, valid, spans) == (2 + 5, 3)


def test_blocks_are_bonus_then_masks_with_labels_inside_the_answer():
    ids = np.arange(100, 112)[None]  # prompt 0..7, answer 8..11
    tm = np.zeros((1, 12), bool)
    tm[0, 8:] = True
    b = make_blocks(ids, tm, 3, 4091, max_blocks=None, rng=None)
    assert b["anchors"][0].tolist() == [8, 9, 10]
    assert b["block_ids"][0, 0].tolist() == [108, 4091, 4091, 4091]
    assert b["labels"][0, 0].tolist() == [109, 110, 111]
    assert b["label_ok"][0].tolist() == [[True] * 3, [True, True, False], [True, False, False]]
    assert b["spans"] == [(8, 12)]


def test_cli_user_error_is_one_line_and_exit_2(capsys, tmp_path):
    from engine.tinymodel.__main__ import main
    assert main(["train-dflash", "--out", str(tmp_path / "o"), "--target", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: no model.safetensors")


# ----------------------------------------------------------------------------- torch
@pytest.fixture(scope="module")
def dm():
    require_module("torch")
    require_module("safetensors")
    from engine.tinymodel import dflash_model
    return dflash_model


def test_config_is_a_dflash_draft_for_the_hybrid(dm):
    cfg = dm.drafter_config()
    target = json.loads((HYBRID / "config.json").read_text())["text_config"]
    assert cfg["architectures"] == ["DFlashDraftModel"] and cfg["model_type"] == "qwen3"
    dc = cfg["dflash_config"]
    # the runner asks the target for aux layers id + 1; the target's model records aux
    # layer j after decoder layer j - 1, so j must be 1..num_hidden_layers
    assert all(1 <= i + 1 <= target["num_hidden_layers"] for i in dc["target_layer_ids"])
    assert dc["target_layer_ids"] == sorted(dc["target_layer_ids"])  # concatenated in layer order
    tok = json.loads((TOK_DIR / "tokenizer.json").read_text())
    used = set(tok["model"]["vocab"].values()) | {t["id"] for t in tok["added_tokens"]}
    assert dc["mask_token_id"] not in used and dc["mask_token_id"] < target["vocab_size"]
    assert dc["mask_token_id"] not in (target.get("image_token_id"), 4092, 4093, 4094, 4095)
    for key in ("hidden_size", "vocab_size", "num_key_value_heads", "head_dim"):
        assert cfg[key] == target[key], key
    with pytest.raises(ValueError):
        dm.drafter_config(target_layer_ids=(6,))


def test_vllm_reads_the_config_as_dflash(dm, tmp_path):
    require_vllm(module_level=False)
    from transformers import AutoConfig
    from vllm.model_executor.models.qwen3_dflash import dflash_has_any_non_causal
    from vllm.model_executor.models.registry import _SPECULATIVE_DECODING_MODELS
    from vllm.transformers_utils.configs.eagle import EAGLEConfig
    (tmp_path / "config.json").write_text(json.dumps(dm.drafter_config()))
    hf = AutoConfig.from_pretrained(tmp_path)
    wrapped = EAGLEConfig(hf, method="dflash", model_type="eagle")  # what SpeculativeConfig does
    assert wrapped.architectures == ["DFlashDraftModel"]
    assert _SPECULATIVE_DECODING_MODELS["DFlashDraftModel"] == ("qwen3_dflash", "DFlashQwen3ForCausalLM")
    assert wrapped.dflash_config["mask_token_id"] == dm.MASK_TOKEN_ID
    # the mirror attends non-causally inside the query block: vLLM must too
    assert dflash_has_any_non_causal(hf)


def test_saved_tensors_are_what_the_vllm_loader_consumes(dm, tmp_path):
    import torch
    from safetensors import safe_open
    cfg = dm.drafter_config(num_layers=2)
    dm.save_drafter(dm.DFlashDrafter(cfg), tmp_path)
    with safe_open(str(tmp_path / "model.safetensors"), "pt") as f:
        saved = {k: tuple(f.get_slice(k).get_shape()) for k in f.keys()}
        dtypes = {f.get_slice(k).get_dtype() for k in f.keys()}
    assert saved == dm.expected_tensor_shapes(cfg)
    assert dtypes == {"BF16"}
    assert not any(s in k for k in saved for s in ("embed_tokens", "lm_head", "mask_hidden", "d2t"))
    want = _vllm_param_shapes(cfg)
    try:
        from vllm.model_executor.models.qwen3_dflash import DFlashQwen3Model
        mapper = DFlashQwen3Model.hf_to_vllm_mapper
    except ImportError:
        missing("vllm's qwen3_dflash is not importable: names checked against the "
                "hard-coded layout only")
    rows: dict[str, dict] = {}
    for name, shape in saved.items():
        [(mapped, t)] = list(mapper.apply([(name, torch.empty(shape))]))
        assert mapped in want, (name, mapped)
        rows.setdefault(mapped, {})[getattr(t, "shard_id", None)] = shape
    assert set(rows) == set(want)
    for mapped, shards in rows.items():
        total = sum(s[0] for s in shards.values())
        assert (total, *next(iter(shards.values()))[1:]) == want[mapped], mapped
        if "qkv_proj" in mapped:
            assert set(shards) == {"q", "k", "v"}
        if "gate_up_proj" in mapped:
            assert set(shards) == {0, 1}


def _toy(dm, layers=2):
    import torch
    torch.manual_seed(0)
    cfg = dm.drafter_config(num_layers=layers, target_layer_ids=(1, 4))
    return dm.DFlashDrafter(cfg).eval(), cfg


def test_each_block_sees_only_its_context_prefix_and_itself(dm):
    import torch
    drafter, cfg = _toy(dm)
    H, K1, T = cfg["hidden_size"], 4, 24
    aux = torch.randn(1, T, 2 * H)
    emb = torch.randn(1, 3, K1, H)
    anchors = torch.tensor([[5, 11, 20]])
    valid = torch.tensor([[True, True, False]])
    with torch.no_grad():
        together = drafter(aux, emb, anchors, valid)
        for b in range(2):  # alone, with the context cut at the anchor: same output
            a = int(anchors[0, b])
            alone = drafter(aux[:, :a], emb[:, b:b + 1], anchors[:, b:b + 1],
                            torch.tensor([[True]]))
            assert torch.allclose(together[0, b], alone[0, 0], atol=1e-5)
        # a change after the anchor, or in another block, does not reach block 0
        aux2, emb2 = aux.clone(), emb.clone()
        aux2[:, 5:] += 1.0
        emb2[:, 1:] += 1.0
        assert torch.allclose(drafter(aux2, emb2, anchors, valid)[0, 0], together[0, 0], atol=1e-5)
        # inside a block attention is non-causal: the last slot reaches the first
        emb3 = emb.clone()
        emb3[0, 0, -1] += 1.0
        assert not torch.allclose(drafter(aux, emb3, anchors, valid)[0, 0, 0], together[0, 0, 0])


def test_save_load_round_trip(dm, tmp_path):
    import torch
    drafter, cfg = _toy(dm, layers=1)
    dm.save_drafter(drafter, tmp_path, extra={"note": "test"})
    back = dm.load_drafter(tmp_path)
    assert json.loads((tmp_path / "config.json").read_text()) == cfg
    for (n1, p1), (n2, p2) in zip(drafter.state_dict().items(), back.state_dict().items()):
        assert n1 == n2 and torch.equal(p1.to(torch.bfloat16).float(), p2)


@pytest.mark.slow
def test_training_runs_a_few_steps_on_cpu(dm, tmp_path):
    require_module("transformers")
    from engine.tinymodel.dflash_train import train_dflash
    out = tmp_path / "drafter"
    info = train_dflash(str(HYBRID), str(TOK_DIR), str(out), time_cap=600, max_steps=2,
                        num_layers=1, blocks_per_seq=4, workers=1, stage=0,
                        tokens_per_batch=256, eval_n=2, harness_seeds=(), log=lambda _m: None)
    assert info["steps"] == 2 and info["curve"][0]["step"] == 1
    ho = info["held_out_acceptance"]["random"]
    assert ho["n"] == 2 and ho["blocks"] > 0 and 1.0 <= ho["acceptance_length"] <= 8.0
    assert len(ho["slot_hit_rate"]) == 7
    saved = json.loads((out / "training.json").read_text())
    assert saved["target_sha256"] and saved["num_speculative_tokens"] == 7
    assert dm.load_drafter(out).cfg["dflash_config"]["target_layer_ids"] == [0, 1, 2, 3, 4, 5]
    # a second run goes on from the saved drafter, keeping its geometry
    again = train_dflash(str(HYBRID), str(TOK_DIR), str(tmp_path / "again"), time_cap=600,
                         max_steps=1, num_layers=3, blocks_per_seq=4, workers=1, stage=0,
                         tokens_per_batch=256, eval_n=1, harness_seeds=(), init_dir=str(out),
                         log=lambda _m: None)
    assert again["init_from"] == str(out) and again["num_layers"] == 1


COMMITTED = ROOT / "engine" / "tinymodel" / "weights" / "dflash"


def test_the_committed_drafter_is_what_vllm_served(dm):
    # The drafter vLLM 0.26.0 served on the H200 (reports/h200/README.md, issue 18): its
    # tensors are the loader's layout, it drafts the thread's k = 7, and its layer count
    # keeps every drafting layer in one KV-cache group beside the committed hybrid.
    from safetensors import safe_open

    from engine.tinymodel.dflash_kv_groups import draft_layers_problem, target_layer_types

    cfg = json.loads((COMMITTED / "config.json").read_text())
    with safe_open(str(COMMITTED / "model.safetensors"), "np") as f:
        saved = {k: tuple(f.get_slice(k).get_shape()) for k in f.keys()}
    assert saved == dm.expected_tensor_shapes(cfg)
    assert cfg["architectures"] == ["DFlashDraftModel"] and cfg["block_size"] == 8
    assert draft_layers_problem(target_layer_types(HYBRID), cfg["num_hidden_layers"]) is None
    training = json.loads((COMMITTED / "training.json").read_text())
    assert training["num_layers"] == cfg["num_hidden_layers"] == 3
    assert training["held_out_acceptance"]["harness_ctx1200_seed0"]["acceptance_length"] > 7
