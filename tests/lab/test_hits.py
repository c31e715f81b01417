"""In-process tests of prefix-cache hits: the hit and its recurrent-state snapshot agree,
a resumed request counts as prefill until its output tokens are recomputed, vLLM's
EAGLE-style block drop, and ``--mamba-cache-mode align`` chunking."""
from __future__ import annotations

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
