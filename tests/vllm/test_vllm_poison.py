"""engine.vllm.poison against a runner laid out as vLLM builds it: vLLM's own KV cache spec
classes name which layers hold recurrent state, the state tensors are strided views into
one shared block-major storage (as ``_reshape_kv_cache_tensors`` makes them), and the
fill is checked byte for byte, through its proof and independently."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from tests._vllm import require_vllm

require_vllm()

import torch  # noqa: E402
from vllm.v1.kv_cache_interface import (FullAttentionSpec, KVCacheGroupSpec,  # noqa: E402
                                        MambaSpec)

from engine.vllm import poison as P  # noqa: E402

BLOCKS = 6


def _runner():
    """Two GDN layers sharing one storage with an attention layer, as in a hybrid's pool:
    block-major raw bytes, each layer's tensors as_strided views into them."""
    conv, ssm = (3, 16), (2, 8, 8)
    conv_n, ssm_n = 3 * 16, 2 * 8 * 8
    page = conv_n + ssm_n + 8                 # padded page: 8 elements no view covers
    raw = torch.zeros(BLOCKS * page, dtype=torch.bfloat16)
    gdn = [torch.as_strided(raw, (BLOCKS, *conv), (page, 16, 1)),
           torch.as_strided(raw, (BLOCKS, *ssm), (page, 64, 8, 1), conv_n)]
    attn = torch.zeros(2, BLOCKS, 4, 2, 8, dtype=torch.bfloat16)
    mspec = MambaSpec(block_size=128, shapes=(conv, ssm), dtypes=(torch.bfloat16,))
    aspec = FullAttentionSpec(block_size=4, num_kv_heads=2, head_size=8, dtype=torch.bfloat16)
    groups = [KVCacheGroupSpec(["model.layers.0.linear_attn"], mspec),
              KVCacheGroupSpec(["model.layers.2.self_attn"], aspec)]
    ctx = {"model.layers.0.linear_attn": SimpleNamespace(kv_cache=gdn),
           "model.layers.2.self_attn": SimpleNamespace(kv_cache=attn)}
    builder = SimpleNamespace(spec_state_indices_tensor=torch.zeros(4, 3, dtype=torch.int32),
                              num_accepted_tokens=torch.full((4,), 3, dtype=torch.int32))
    runner = SimpleNamespace(
        compilation_config=SimpleNamespace(static_forward_context=ctx),
        kv_cache_config=SimpleNamespace(kv_cache_groups=groups),
        attn_groups=[[SimpleNamespace(metadata_builders=[builder])]], kv_caches=[gdn, attn])
    worker = P.PoisonWorker()
    worker.model_runner = runner
    return worker, raw, gdn, attn, builder


def test_state_fill_writes_the_pattern_through_the_views_and_proves_it():
    worker, raw, gdn, attn, _ = _runner()
    out = worker.residue_lab_poison("state", "A")
    proof = out["regions"]["state"]
    assert out["ok"] and proof["ok"] and proof["checksum"] == proof["expected"]
    assert proof["tensors"] == 2 and proof["bytes"] == BLOCKS * (48 + 128) * 2
    # every block holds the same tile: a stale index reads the same bytes wherever it points
    for t in gdn:
        assert torch.equal(t[0], t[BLOCKS - 1]) and t.abs().max() <= 1.0 and t.abs().sum() > 0
    assert torch.count_nonzero(attn) == 0             # kv untouched
    page = raw.view(BLOCKS, -1)
    assert torch.count_nonzero(page[:, -8:]) == 0     # padding bytes untouched by views


def test_patterns_differ_and_repeat_exactly():
    worker, _, gdn, _, _ = _runner()
    worker.residue_lab_poison("state,kv", "A")
    a = [t.clone() for t in gdn]
    worker.residue_lab_poison("state,kv", "B")
    assert not torch.equal(a[1], gdn[1])
    worker.residue_lab_poison("state,kv", "A")
    assert all(torch.equal(x, t) for x, t in zip(a, gdn))
    tile = P.pattern_tile((8, 8), torch.float32, P.PATTERNS["A"], salt=1)
    assert torch.isfinite(tile).all() and tile.min() >= -1 and tile.max() < 1


def test_the_proof_fails_when_a_byte_is_not_the_pattern(monkeypatch):
    worker, *_ = _runner()
    real_copy = torch.Tensor.copy_

    def lossy(self, src, *a, **k):   # a fill that silently misses one element
        real_copy(self, src, *a, **k)
        if self.dim() == 3:
            self[0, 0, 0] = 7.0
        return self
    monkeypatch.setattr(torch.Tensor, "copy_", lossy)
    out = worker.residue_lab_poison("state", "A")
    monkeypatch.undo()
    proof = out["regions"]["state"]
    assert out["ok"] is False and proof["checksum"] != proof["expected"]


def test_builders_are_restored_to_the_boot_copy_not_filled():
    worker, _, _, _, builder = _runner()
    assert worker.residue_lab_poison("builders")["ok"] is False   # not armed: no proof
    assert worker.residue_lab_arm()["builders"]["tensors"] == 2
    builder.spec_state_indices_tensor.fill_(41)
    builder.num_accepted_tokens.fill_(2)
    out = worker.residue_lab_poison("builders")
    assert out["ok"] and int(builder.spec_state_indices_tensor.sum()) == 0
    assert builder.num_accepted_tokens.tolist() == [3, 3, 3, 3]


def test_null_fills_block_zero_only_and_store0_zeroes_padding_too():
    worker, raw, gdn, _, _ = _runner()
    worker.residue_lab_poison("null", "A")
    assert gdn[1][0].abs().sum() > 0 and torch.count_nonzero(gdn[1][1:]) == 0
    worker.residue_lab_poison("bytes", "A")
    assert torch.count_nonzero(raw.view(BLOCKS, -1)[:, -8:]) > 0
    out = worker.residue_lab_poison("store0")
    assert out["ok"] and torch.count_nonzero(raw) == 0


def test_describe_names_each_layer_and_the_null_block():
    worker, *_ = _runner()
    d = worker.residue_lab_describe()
    assert [r["kind"] for r in d["layers"]] == ["state", "kv"]
    assert len(d["layers"][0]["null"]) == 2
    assert {tuple(b["shape"]) for b in d["builders"]} == {(4, 3), (4,)}


def test_unknown_region_is_refused():
    with pytest.raises(ValueError, match="unknown poison region"):
        P.parse_regions("state,heap")


def test_checksum_reduces_large_tensors_in_slabs_exactly(monkeypatch):
    """A 1-D storage, a strided view and a tensor whose one slice is over the slab: the
    slab sums equal one whole sum (and no per-element loop: the 1-D case must be fast)."""
    monkeypatch.setattr(P, "_SUM_SLAB", 1000)
    flat = torch.randint(0, 255, (50_001,), dtype=torch.uint8)
    assert P.checksum(flat) == int(flat.to(torch.int64).sum())
    big = torch.randn(7, 3, 40, 40).to(torch.bfloat16)
    view = big[:, 1]
    want = int(view.contiguous().view(torch.int16).to(torch.int64).sum())
    assert P.checksum(view) == want
    assert P.checksum(big) == int(big.view(torch.int16).to(torch.int64).sum())
