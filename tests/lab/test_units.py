"""In-process unit tests of the lab engine's mechanisms (no HTTP)."""
from __future__ import annotations

import numpy as np
import pytest

from engine.lab.block_pool import BlockPool
from engine.lab.config import MODEL_DIR, CapacityError, ConfigError, LabConfig, ModelGeometry
from engine.lab.engine_core import EngineCore
from engine.lab.kv_cache_manager import SlidingWindowGroup
from engine.lab.model import parse_instruction
from engine.lab.request import Request
from engine.lab.tokenizer import LabTokenizer

GEO = ModelGeometry.load(MODEL_DIR)
TOK = LabTokenizer(MODEL_DIR)


@pytest.mark.parametrize("k,page", [(1, 2048), (3, 2048), (5, 2176), (7, 2176), (15, 2304)])
def test_page_block_from_page_arithmetic(k, page):
    assert GEO.page_block(k, 128) == page
    assert GEO.page_block(k, 16) == page  # aligned to the 128-token state chunk


def test_sliding_window_promotion():
    assert GEO.sliding_window_block("dflash", 3, "hybrid", 128) == 2048   # #18 geometry
    assert GEO.sliding_window_block("dflash", 7, "hybrid", 128) == 128    # 2176: not a pow2
    assert GEO.sliding_window_block("dflash", 3, "dense", 128) == 128
    assert GEO.sliding_window_block("mtp", 3, "hybrid", 128) is None


def test_sliding_window_assert_and_guard():
    with pytest.raises(AssertionError):
        SlidingWindowGroup(2048, guard_patch=False).find_longest_cache_hit(896, 128)
    assert SlidingWindowGroup(2048, guard_patch=True).find_longest_cache_hit(896, 128) == 0
    assert SlidingWindowGroup(128, guard_patch=False).find_longest_cache_hit(896, 128) == 896
    assert SlidingWindowGroup(64, guard_patch=False).find_longest_cache_hit(896, 128) == 896


def _cfg(**kw) -> LabConfig:
    return LabConfig(**kw).finalize()


def test_capacity_numbers():
    kv = int(4.9 * 2**30)
    dflash15 = {"method": "dflash", "num_speculative_tokens": 15}
    with pytest.raises(CapacityError, match=r"\(245760\), 5\.16 GiB .* \(4\.90 GiB\)"):
        _cfg(speculative_config=dflash15, max_model_len=245760, kv_cache_memory_bytes=kv)
    _cfg(speculative_config=dflash15, max_model_len=221184, kv_cache_memory_bytes=kv)
    for spec in ({"method": "mtp", "num_speculative_tokens": 3},
                 {"method": "ngram", "num_speculative_tokens": 3},
                 {"method": "dflash", "num_speculative_tokens": 7}):
        _cfg(speculative_config=spec, max_model_len=245760, kv_cache_memory_bytes=kv)
    with pytest.raises(ConfigError):
        _cfg(block_size=128, prefix_match_unit=96)


def test_block_pool_lru_eviction_order():
    pool = BlockPool(4, 2, True)
    a = pool.get_new_blocks(2)
    pool.cache_block(a[0], 111)
    pool.cache_block(a[1], 222)
    pool.free_blocks(list(reversed(a)))          # tail first
    assert pool.get_cached_block(111) == a[0]
    b = pool.get_new_blocks(3)                   # 2 never-used blocks, then the LRU: a[1]
    assert a[1] in b and pool.get_cached_block(222) is None
    assert pool.get_cached_block(111) == a[0]    # the prefix block survives longer
    pool.touch([a[0]])                           # a hit takes it out of the free queue
    assert pool.num_free_blocks == 0


@pytest.mark.parametrize("lines,expected", [
    (["Reproduce the first 3 lines of the document below exactly.", "", "a", "b", "c", "d"],
     (2, 6, 3)),
    (["```", "a", "b", "```", "", "Copy the opening two lines of the text above verbatim."],
     (1, 3, 2)),
    (["Copy the first 2 lines of this text:", "A", "B", "C"], (1, 4, 2)),
    (["a", "b", "", "Reproduce the first line of the document above."], (0, 2, 1)),
    (["He wrote 3 lines.", "x", "", "Print the top seven lines of the text above."], (0, 2, 7)),
    (["Output lines 1-4 of the text below verbatim.", "", "a", "b"], (2, 4, 4)),
    (["a", "", "Repeat lines 1 through nine of the text above."], (0, 1, 9)),
])
def test_parse_instruction(lines, expected):
    assert parse_instruction(lines) == expected


def test_tokenizer_newline_is_its_own_token():
    ids = TOK.encode("alpha beta.\n\n  gamma\n~~~~\n")
    pieces = [TOK.decode([i]) for i in ids]
    assert all("\n" not in p or p == "\n" for p in pieces)
    assert TOK.decode(ids) == "alpha beta.\n\n  gamma\n~~~~\n"
    text = TOK.apply_chat_template([{"role": "user", "content": "hi"}])
    assert text == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    assert len(TOK.encode("<|im_end|>\n<|im_start|>assistant\n")) == 5


def _run(core: EngineCore, content: str, max_tokens: int = 400) -> tuple[str, Request]:
    ids = TOK.encode(TOK.apply_chat_template([{"role": "user", "content": content}]))
    req = Request(f"r{id(content)}-{len(core.scheduler.requests)}", ids, max_tokens,
                  TOK.stop_token_ids)
    core.add_request(req)
    while core.has_work():
        core.step()
    return TOK.decode(req.output_token_ids), req


def _content_at_residue(residue: int, modulus: int = 128) -> str:
    doc = "\n".join(f"line {i} of the quiet river text" for i in range(60))
    for n in range(400):
        c = f"Copy the first 3 lines of the text below.\n\n{doc}\n" + " ".join(["~~"] + ["the"] * n)
        L = len(TOK.encode(TOK.apply_chat_template([{"role": "user", "content": c}])))
        if L % modulus == residue:
            return c
    raise AssertionError


@pytest.mark.parametrize("patches,broken", [((), True), (("prefill-discriminator",), False)])
def test_dispatch_in_process(patches, broken):
    cfg = _cfg(enable_prefix_caching=True, block_size=128, prefix_match_unit=128,
               speculative_config={"method": "mtp", "num_speculative_tokens": 3},
               cudagraph_mode="FULL_AND_PIECEWISE", patches=patches)
    core = EngineCore(cfg, TOK)
    content = _content_at_residue(4)
    expected = "\n".join(f"line {i} of the quiet river text" for i in range(3))
    cold, _ = _run(core, content)
    assert cold == expected
    captured_before = core.runner.dispatch_counts["FULL"]
    hit, req = _run(core, content)
    assert req.num_cached_tokens == req.num_prompt_tokens - 4
    assert (hit != expected) is broken
    assert (len(hit) <= 1) is broken
    # the captured plan also served every uniform decode step (identically)
    assert captured_before > 0


@pytest.mark.parametrize("capture,broken", [(4, True), (3, False)])
def test_a_uniform_batch_above_the_capture_size_runs_piecewise(capture, broken):
    """-cc max_cudagraph_capture_size (vLLM's CompilationConfig field): the largest uniform
    decode batch, in tokens, that replays the captured plan. A lone 4-token final chunk
    breaks at 4 and answers right at 3 (PIECEWISE), as a batch above vLLM's largest
    captured size runs piecewise; tests/harness/test_live_traffic.py puts six decode rows
    beside the chunk with 16 to make its masking certain."""
    cfg = _cfg(enable_prefix_caching=True, block_size=128, prefix_match_unit=128,
               speculative_config={"method": "mtp", "num_speculative_tokens": 3},
               cudagraph_mode="FULL_AND_PIECEWISE", patches=(),
               max_cudagraph_capture_size=capture)
    core = EngineCore(cfg, TOK)
    content = _content_at_residue(4)
    expected = "\n".join(f"line {i} of the quiet river text" for i in range(3))
    assert _run(core, content)[0] == expected
    hit, req = _run(core, content)
    assert req.num_cached_tokens == req.num_prompt_tokens - 4
    assert (hit != expected) is broken


def test_the_capture_size_is_read_from_the_compilation_config():
    from engine.lab.cli import config_from_args
    assert config_from_args([]).max_cudagraph_capture_size == 512
    cc = '{"cudagraph_mode": "FULL", "max_cudagraph_capture_size": 16}'
    assert config_from_args(["-cc", cc]).max_cudagraph_capture_size == 16


def test_verify_is_lossless():
    """Spec decoding (any method) gives exactly the non-spec output."""
    content = _content_at_residue(17)
    outs = set()
    for spec in (None, {"method": "mtp", "num_speculative_tokens": 3},
                 {"method": "dflash", "num_speculative_tokens": 7},
                 {"method": "ngram", "num_speculative_tokens": 5}):
        core = EngineCore(_cfg(speculative_config=spec), TOK)
        outs.add(_run(core, content)[0])
    assert len(outs) == 1


def test_chunked_prefill_matches_single_chunk():
    content = _content_at_residue(50)
    a = _run(EngineCore(_cfg(max_num_batched_tokens=8192), TOK), content)[0]
    b = _run(EngineCore(_cfg(max_num_batched_tokens=64), TOK), content)[0]
    assert a == b != ""


def test_tiny_pool_admission_and_preemption_are_lossless():
    cfg = _cfg(kv_cache_memory_bytes=17408 * 2048, max_model_len=2048, block_size=16,
               speculative_config={"method": "mtp", "num_speculative_tokens": 3})
    core = EngineCore(cfg, TOK)
    contents = [_content_at_residue(r) for r in (10, 20, 30)]
    reqs = []
    for c in contents:
        ids = TOK.encode(TOK.apply_chat_template([{"role": "user", "content": c}]))
        r = Request(f"p{len(reqs)}", ids, 300, TOK.stop_token_ids)
        core.add_request(r)
        reqs.append(r)
    for _ in range(10000):
        if not core.has_work():
            break
        core.step()
    expected = "\n".join(f"line {i} of the quiet river text" for i in range(3))
    assert [TOK.decode(r.output_token_ids) for r in reqs] == [expected] * 3


def test_hostile_history_is_not_quadratic():
    """A huge assistant turn in the history (every token a pointer mismatch) and a huge
    role line: the state update stays fast (indexed induction lookup, capped role)."""
    import time

    cfg = _cfg(max_model_len=131072, block_size=128)
    core = EngineCore(cfg, TOK)
    words = " ".join(f"w{i % 997}" for i in range(30000))
    msgs = [{"role": "user", "content": "Copy the first line.\n\nalpha\nbeta"},
            {"role": "assistant", "content": words},
            {"role": "x" * 3000, "content": "y"},
            {"role": "user", "content": "Copy the first 2 lines.\n\none\ntwo\nthree"}]
    ids = TOK.encode(TOK.apply_chat_template(msgs))
    assert len(ids) > 40000
    req = Request("hostile", ids, 20, TOK.stop_token_ids)
    core.add_request(req)
    t = time.monotonic()
    while core.has_work():
        core.step()
    assert time.monotonic() - t < 10
    assert TOK.decode(req.output_token_ids) == "one\ntwo"


def test_batch_layout_shifts_only_a_row_after_a_whole_page_row():
    from engine.lab.batch_layout import read_rows
    a, b = np.arange(1, 33, dtype=np.int32), np.arange(100, 120, dtype=np.int32)
    assert [list(x) for x in read_rows([a], 16, False)] == [list(a)]          # alone: as is
    got = read_rows([a, b], 16, False)                                         # 32 = 2 pages
    assert list(got[0]) == list(a) and list(got[1][:16]) == [0] * 16           # a page late
    assert list(got[1][16:]) == list(b[:4])
    assert [list(x) for x in read_rows([a, b], 16, True)] == [list(a), list(b)]
    c = a[:30]                                                                 # not whole pages
    assert [list(x) for x in read_rows([c, b], 16, False)] == [list(c), list(b)]


def test_eviction_key_misses_the_hybrid_attention_group_unpatched():
    for patched, stale in ((False, True), (True, False)):
        pool = BlockPool(4, 16, True, group_id=1, evict_group_key=patched)
        (blk,) = pool.get_new_blocks(1)
        pool.cache_block(blk, 111, "p")
        pool.free_blocks([blk])
        pool.get_new_blocks(4)                       # every block reallocated: blk evicted
        assert pool.evicted == ["p"]
        assert (pool.get_cached_block(111) == blk) is stale
