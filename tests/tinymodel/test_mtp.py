"""The tiny hybrid's MTP head: layout against vLLM's own source, the chained draft steps
against a one-query-at-a-time proposer, and the committed head's acceptance on the CPU."""
from __future__ import annotations

import ast
import importlib.util
import json
from pathlib import Path

import pytest

from tests._vllm import require_module, require_vllm

from engine.tinymodel.mtp import MTP_FILE, check_layout, expected_shapes
from engine.tinymodel.mtp_train import simulate_rounds

ROOT = Path(__file__).resolve().parents[2]
COMMITTED = ROOT / "engine" / "tinymodel" / "weights" / "hybrid"
TEXT = json.loads((COMMITTED / "config.json").read_text())["text_config"]


def test_fifteen_tensors_shaped_like_the_targets_attention_layer():
    shapes = expected_shapes(TEXT)
    assert len(shapes) == 15 and all(n.startswith("mtp.") for n in shapes)
    h, hd = TEXT["hidden_size"], TEXT["head_dim"]
    assert shapes["mtp.fc.weight"] == (h, 2 * h)
    assert shapes["mtp.layers.0.self_attn.q_proj.weight"] == (2 * TEXT["num_attention_heads"] * hd, h)
    assert shapes["mtp.layers.0.self_attn.q_norm.weight"] == (hd,)


def _vllm_mtp_source() -> ast.Module:
    require_vllm(module_level=False)
    spec = importlib.util.find_spec("vllm")
    path = Path(spec.origin).parent / "model_executor" / "models" / "qwen3_5_mtp.py"
    return ast.parse(path.read_text())


def _self_attrs(cls: ast.ClassDef) -> set[str]:
    init = next(f for f in cls.body if isinstance(f, ast.FunctionDef) and f.name == "__init__")
    return {t.attr for node in ast.walk(init) if isinstance(node, ast.Assign)
            for t in node.targets if isinstance(t, ast.Attribute)
            and isinstance(t.value, ast.Name) and t.value.id == "self"}


def test_names_are_what_vllms_qwen3_5_mtp_loader_maps():
    """In vLLM's own qwen3_5_mtp.py: ``mtp.`` is rewritten to ``model.`` (the
    predictor), the predictor owns fc / the three norms / layers, and q|k|v and gate|up
    are the packed modules our per-projection names feed."""
    tree = _vllm_mtp_source()
    classes = {c.name: c for c in ast.walk(tree) if isinstance(c, ast.ClassDef)}
    predictor = _self_attrs(classes["Qwen3_5MultiTokenPredictor"])
    tops = {n.split(".")[1] for n in expected_shapes(TEXT)}
    assert tops <= predictor, tops - predictor
    src = ast.unparse(classes["Qwen3_5MTP"])
    assert "name.replace('mtp.', 'model.')" in src
    assert "'qkv_proj': ['q_proj', 'k_proj', 'v_proj']" in src
    assert "'gate_up_proj': ['gate_proj', 'up_proj']" in src
    assert "mamba_cache_mode == 'all'" in src  # hence --mamba-cache-mode align


def test_committed_checkpoint_has_the_head_vllm_loads():
    assert (COMMITTED / MTP_FILE).is_file()
    assert check_layout(COMMITTED) == []


def test_layout_check_names_what_is_missing(tmp_path):
    d = tmp_path / "m"
    d.mkdir()
    cfg = {"model_type": "qwen3_5", "text_config": dict(TEXT, mtp_num_hidden_layers=0)}
    (d / "config.json").write_text(json.dumps(cfg))
    problems = check_layout(d)
    assert any("mtp_num_hidden_layers" in p for p in problems)
    assert sum(p.startswith("missing mtp.") for p in problems) == 15


def test_rounds_walk_counts_like_vllms_counters():
    # answer of 10 tokens (the last is <|im_end|>) starting at index 5, k = 3
    L, end, k = 5, 15, 3
    right = [[True] * 20 for _ in range(k)]
    assert simulate_rounds(right, L, end, k) == (3, 7)  # 4 + 4 + 2 tokens
    wrong = [[False] * 20 for _ in range(k)]
    assert simulate_rounds(wrong, L, end, k) == (9, 0)  # one token a round
    first_only = [[True] * 20, [False] * 20, [False] * 20]
    assert simulate_rounds(first_only, L, end, k) == (5, 5)  # the 5th accepts <|im_end|>


torch = require_module("torch", module_level=True)


def _small_head():
    from engine.tinymodel.mtp import build_head
    tc = dict(hidden_size=32, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
              intermediate_size=48, rms_norm_eps=1e-6, mtp_num_hidden_layers=1,
              rope_parameters=dict(rope_theta=10000.0, partial_rotary_factor=0.5))
    torch.manual_seed(0)
    head = build_head(tc).double()
    with torch.no_grad():
        for p in head.parameters():
            p.normal_(0, 0.3)
    return head


def _one_query(head, emb_p, hidden_p, pos, past_k, past_v):
    """Step at one position as vLLM's proposer runs it: one query over the KV cache
    (``past_*``) plus its own key. Returns (output after norm, own k, own v)."""
    layer = head.layers[0]
    x = head.fc(torch.cat([head.pre_fc_norm_embedding(emb_p), head.pre_fc_norm_hidden(hidden_p)], -1))
    cos, sin = head.rope(1, x.dtype, x.device, offset=pos)
    q, gate, k, v = layer.self_attn.project(layer.input_layernorm(x), cos, sin)
    keys, vals = torch.cat([past_k, k], 2), torch.cat([past_v, v], 2)
    w = torch.softmax((q @ keys.transpose(2, 3)) * layer.self_attn.hd ** -0.5, -1)
    x = x + layer.self_attn.finish(w @ vals, gate)
    x = x + layer.mlp(layer.post_attention_layernorm(x))
    return head.norm(x), k, v


@pytest.mark.parametrize("t", [0, 3, 6])
def test_parallel_draft_steps_equal_the_sequential_proposer(t):
    """Steps 2 and 3 in the parallel training layout (``staircase``) give, at position
    t + s - 1, what vLLM's proposer computes for the chain that starts at t: the first
    pass's keys up to t, then the keys of the chain's own later steps."""
    head = _small_head()
    T = 10
    emb, h0 = torch.randn(1, T, 32, dtype=torch.double), torch.randn(1, T, 32, dtype=torch.double)
    hist, outs, hidden = [], [], h0
    for s in range(3):
        o = head.step(emb, hidden, hist, step_idx=s)
        outs.append(o)
        hidden = torch.cat([torch.zeros_like(o[:, :1]), o[:, :-1]], dim=1)
    k1, v1 = hist[0]
    past_k, past_v = k1[:, :, :t + 1], v1[:, :, :t + 1]
    prev = outs[0][:, t:t + 1]
    for s in (2, 3):
        p = t + s - 1
        ref, k, v = _one_query(head, emb[:, p:p + 1], prev, p, past_k, past_v)
        torch.testing.assert_close(outs[s - 1][:, p:p + 1], ref, rtol=1e-5, atol=1e-5)  # norms run in fp32
        past_k, past_v, prev = torch.cat([past_k, k], 2), torch.cat([past_v, v], 2), ref


@pytest.mark.slow
def test_committed_head_acceptance_on_harness_plans_cpu():
    """Teacher-forced estimate for k = 3 on two harness plans (document seed 0, context
    1,200): the target reproduces the answers, and the head's drafts give >= 2 tok/step."""
    require_module("transformers")
    from engine.tinymodel.mtp_train import check
    res = check(str(COMMITTED), k=3, residues=[4, 60])
    assert res["target_exact"] == 2
    assert res["tok_per_step_min"] >= 2.0, res
