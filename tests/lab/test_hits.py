"""In-process tests of prefix-cache hits: the hit and its recurrent-state snapshot agree,
a resumed request counts as prefill until its output tokens are recomputed, vLLM's
EAGLE-style block drop, and ``--mamba-cache-mode align`` chunking."""
from __future__ import annotations

import functools

import numpy as np
import pytest

from engine.lab.config import MODEL_DIR, LabConfig
from engine.lab.engine_core import EngineCore
from engine.lab.model import SeqView, State
from engine.lab.model_runner import CAPTURED, EAGER
from engine.lab.request import Request
from engine.lab.tokenizer import LabTokenizer

TOK = LabTokenizer(MODEL_DIR)
DOC = [f"line {i} of the quiet river text and its slow copper bridges" for i in range(900)]


def _cfg(**kw) -> LabConfig:
    return LabConfig(**{"geometry": "hybrid", **kw}).finalize()


def _request(messages: list[dict], rid: str, max_tokens: int = 60) -> Request:
    ids = TOK.encode(TOK.apply_chat_template(messages))
    return Request(rid, ids, max_tokens, TOK.stop_token_ids)


def _run(core: EngineCore, req: Request) -> Request:
    core.add_request(req)
    for _ in range(100_000):
        if not core.has_work():
            return req
        core.step()
    raise AssertionError("engine did not finish")


def _state_before(tokens: np.ndarray, n: int, bs: int) -> State:
    """Ground truth: the recurrent state after tokens[:n], from scratch, no cache."""
    nb = -(-len(tokens) // bs)
    kv_tok = np.full(nb * bs, -1, dtype=np.int32)
    kv_tok[:len(tokens)] = tokens
    kv_pos = np.full(nb * bs, -1, dtype=np.int64)
    kv_pos[:len(tokens)] = np.arange(len(tokens))
    view = SeqView(kv_tok, kv_pos, np.arange(nb, dtype=np.int32), bs, len(tokens))
    core = EngineCore(_cfg(), TOK)
    s = State()
    core.model.advance(s, view, 0, tokens[:n], [])
    return s


def test_sliding_window_lowered_hit_gets_the_snapshot_of_its_own_boundary():
    """dflash k=3: the SW block is promoted to 2048; a 3072-token unit is not a multiple of
    it, so the pre-fix guard lowers the hit to a multiple of lcm = 6144. The recurrent
    snapshot must be the one at the lowered hit, not at the unit-aligned one above it."""
    cfg = _cfg(enable_prefix_caching=True, block_size=128, prefix_match_unit=3072,
               speculative_config={"method": "dflash", "num_speculative_tokens": 3},
               cudagraph_mode="PIECEWISE")
    assert cfg.sliding_window_block == 2048
    core = EngineCore(cfg, TOK)
    # user turn over 6144, the history's assistant turn over 9216: different states there
    messages = [{"role": "user", "content": "Copy the first 400 lines of the text below.\n\n"
                 + "\n".join(DOC[:330])},
                {"role": "assistant", "content": "\n".join(DOC[:400])},
                {"role": "user", "content": "Copy the first 3 lines of the text above."}]
    cold = _run(core, _request(messages, "cold"))
    hit_req = _request(messages, "hit")
    assert hit_req.num_prompt_tokens > 9216 + 128
    core.kvm.update_block_hashes(hit_req)
    _, hit, snapshot = core.kvm.get_computed_blocks(hit_req)
    assert hit == 6144  # 9216 lowered to the lcm
    truth = _state_before(hit_req.prompt_token_ids, hit, cfg.block_size)
    assert repr(truth) != repr(_state_before(hit_req.prompt_token_ids, 9216, cfg.block_size))
    assert repr(snapshot) == repr(truth)
    hit_req = _run(core, _request(messages, "hit2"))
    assert hit_req.num_cached_tokens == 6144
    assert hit_req.output_token_ids == cold.output_token_ids


def test_resumed_request_is_prefill_until_its_outputs_are_recomputed():
    """vLLM V2 counts the output tokens a preempted request must recompute in
    ``prefill_len``; the lab's discriminator does too, so a final recompute chunk of
    exactly 1 + k tokens is not dispatched as uniform decode under the patch."""
    k = 3
    for patches, plan in (((), CAPTURED), (("prefill-discriminator",), EAGER)):
        core = EngineCore(_cfg(speculative_config={"method": "mtp", "num_speculative_tokens": k},
                               cudagraph_mode="FULL_AND_PIECEWISE", patches=patches), TOK)
        req = _request([{"role": "user", "content": "Copy the first line.\n\nalpha"}], "r")
        req.output_token_ids = [int(t) for t in TOK.encode(" one two three four five six")]
        req.num_computed_tokens = req.prefill_target - (1 + k)
        assert req.num_computed_tokens > req.num_prompt_tokens  # past the prompt already
        assert req.is_prefill
        assert core.runner.dispatch([(req, 1 + k, [])]) == plan


# -- vLLM 0.26.0's align mode and EAGLE-style block drop -----------------------------------
HUGE = dict(enable_prefix_caching=True, block_size=128, prefix_match_unit=128,
            enable_prompt_tokens_details=True)
MTP3 = {"method": "mtp", "num_speculative_tokens": 3}
EXPECTED = "\n".join(DOC[:3])


@functools.cache
def _content_at_residue(residue: int, lo: int = 4096, hi: int = 4224) -> str:
    """A user message whose templated length is in (lo, hi) and = residue (mod 128)."""
    body = "\n".join(DOC[:300])
    length = lambda c: len(TOK.encode(TOK.apply_chat_template([{"role": "user", "content": c}])))  # noqa: E731
    make = lambda n: f"Copy the first 3 lines of the text below.\n\n{body}\n" + " ".join(["~~"] + ["the"] * n)  # noqa: E731
    base = length(make(0))
    for n in range(max(0, lo - base), hi - base + 8):  # one " the" is about one token
        L = length(make(n))
        if lo < L < hi and L % 128 == residue:
            return make(n)
    raise AssertionError("no prompt at that residue")


def _prompt_at_residue(residue: int) -> list[dict]:
    return [{"role": "user", "content": _content_at_residue(residue)}]


def _run_chunks(core: EngineCore, req: Request) -> tuple[str, list[int]]:
    """Run one request to the end; the answer and its prefill chunk sizes."""
    core.add_request(req)
    chunks = []
    for _ in range(100_000):
        if not core.has_work():
            return TOK.decode(req.output_token_ids), chunks
        so = core.scheduler.schedule()
        chunks += [n for r, n, _ in so.items if r.is_prefill]
        core.scheduler.update_from_output(so, core.runner.execute(so.items))
    raise AssertionError("engine did not finish")


def _cold_and_hit(residue: int, **kw) -> tuple[tuple[str, list[int]], tuple[str, list[int]], int]:
    core = EngineCore(_cfg(**HUGE, speculative_config=MTP3, cudagraph_mode="FULL_AND_PIECEWISE",
                           **kw), TOK)
    # a cold break reads stale state, which is per process until filled (engine/lab/poison.py):
    # filled as the harness does by default, its answer is the same in every process
    core.stale.residue_lab_arm()
    assert core.stale.residue_lab_poison()["ok"]
    m = _prompt_at_residue(residue)
    cold = _run_chunks(core, _request(m, "cold", 400))
    hit_req = _request(m, "hit", 400)
    hit = _run_chunks(core, hit_req)
    return cold, hit, hit_req.num_cached_tokens


def test_default_all_mode_is_the_threads_stack():
    """Default: cold clean, the hit leaves a 4-token tail and breaks (README main flow)."""
    (cold, cold_chunks), (hit, hit_chunks), cached = _cold_and_hit(4, patches=())
    assert cold == EXPECTED and len(cold_chunks) == 1
    assert hit_chunks == [4] and hit == ""
    cfg = _cfg(**HUGE, speculative_config=MTP3)
    eff = cfg.effective()
    assert (eff["mamba_cache_mode"], eff["mamba_block_size"], eff["drop_eagle_block"]) == \
        ("all", None, False)


def test_align_mode_breaks_cold_and_drops_the_last_block_on_a_hit():
    """``--mamba-cache-mode align`` (upstream 0.26.0): chunks end at page-block (2048)
    boundaries and at the last hash boundary, one block early for MTP, so a cold prompt of
    length 4 (mod 128) ends with a 4-token chunk and breaks; the MTP hit drops its last
    unit and falls back to the 2048 state, then ends with the same 4-token chunk."""
    (cold, cold_chunks), (hit, hit_chunks), cached = _cold_and_hit(
        4, patches=(), mamba_cache_mode="align")
    assert cold_chunks == [2048, 2048, 4] and cold != EXPECTED and len(cold) <= 1
    assert cached == 2048 and hit_chunks == [2048, 4] and hit != EXPECTED
    eff = _cfg(**HUGE, speculative_config=MTP3, mamba_cache_mode="align").effective()
    assert (eff["mamba_cache_mode"], eff["mamba_block_size"], eff["drop_eagle_block"]) == \
        ("align", 2048, True)


@pytest.mark.parametrize("residue,patches", [(4, ("prefill-discriminator",)), (5, ()), (64, ())])
def test_align_mode_clean_where_the_rule_says(residue, patches):
    (cold, _), (hit, _), cached = _cold_and_hit(residue, patches=patches,
                                                 mamba_cache_mode="align")
    assert cold == hit == EXPECTED
    assert cached == 2048


def test_ngram_hit_keeps_its_last_block_in_align_mode():
    """ngram is not EAGLE-style: no drop, the hit is the last hash boundary."""
    core = EngineCore(_cfg(**HUGE, speculative_config={"method": "ngram",
                                                       "num_speculative_tokens": 3},
                           mamba_cache_mode="align"), TOK)
    m = _prompt_at_residue(9)
    _run_chunks(core, _request(m, "cold", 400))
    req = _request(m, "hit", 400)
    _run_chunks(core, req)
    assert req.num_cached_tokens == req.num_prompt_tokens - 9


def test_mamba_cache_mode_none_gives_a_hybrid_no_hits():
    core = EngineCore(_cfg(**HUGE, mamba_cache_mode="none"), TOK)
    m = _prompt_at_residue(9)
    _run_chunks(core, _request(m, "cold", 400))
    req = _request(m, "hit", 400)
    assert _run_chunks(core, req)[0] == EXPECTED
    assert req.num_cached_tokens == 0
