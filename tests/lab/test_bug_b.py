"""Bug B through HTTP on real lab processes (one fresh server per data point).

Unpatched + spec decode + FULL_AND_PIECEWISE + prefix caching + match unit 128: a prompt
whose templated length is ≡ k+1 (mod 128) answers verbatim cold and breaks on the
self-hit, because its 1+k-token tail replays the captured verify plan.
"""
from __future__ import annotations

import re

import pytest

from labserver import (DFLASH7, FULL, HUGE, MTP, PIECEWISE, make_document, pad_to_residue,
                       padding)

DOC = make_document(40)
N = 5
EXPECTED = "\n".join(DOC[:N])


def build(n: int) -> str:
    return (f"Reproduce the first {N} lines of the document below exactly.\n\n"
            + "\n".join(DOC) + "\n" + padding(n))


def measure(srv, content: str, max_tokens: int = 600) -> dict:
    c0 = srv.counters()
    out = srv.chat(content, max_tokens=max_tokens)
    c1 = srv.counters()
    drafts = c1["vllm:spec_decode_num_drafts_total"] - c0["vllm:spec_decode_num_drafts_total"]
    acc = (c1["vllm:spec_decode_num_accepted_tokens_total"]
           - c0["vllm:spec_decode_num_accepted_tokens_total"])
    ch = out["choices"][0]
    return {"text": ch["message"]["content"] or "", "finish": ch["finish_reason"],
            "usage": out["usage"], "cached": out["usage"]["prompt_tokens_details"]["cached_tokens"],
            "tok_per_step": (1 + acc / drafts) if drafts else None}


def run_point(server, spec: str, mode: str, patches: str, residue: int, extra=()):
    srv = server("--speculative-config", spec, "-cc", mode, "--patches", patches, *HUGE, *extra)
    content, length = pad_to_residue(srv, build, residue)
    assert length % 128 == residue
    cold = measure(srv, content)
    hit = measure(srv, content)
    assert cold["usage"]["prompt_tokens"] == length == hit["usage"]["prompt_tokens"]
    assert cold["cached"] == 0
    return length, cold, hit


@pytest.mark.parametrize("residue", [3, 4, 5])
def test_mtp_full_unpatched_breaks_residue_4_only(server, residue):
    length, cold, hit = run_point(server, MTP, FULL, "none", residue)
    assert cold["text"] == EXPECTED and cold["finish"] == "stop"
    assert 3.0 < cold["tok_per_step"] <= 4.0
    # self-hit: the cache serves whole 128-token units, the last token is recomputed
    assert hit["cached"] == (length - 1) // 128 * 128
    if residue == 4:
        assert len(hit["text"]) <= 1, hit["text"]
        assert hit["finish"] == "stop"
        assert hit["tok_per_step"] is None or hit["tok_per_step"] == pytest.approx(1.0)
    else:
        assert hit["text"] == EXPECTED and hit["finish"] == "stop"


@pytest.mark.parametrize("mode,patches", [(PIECEWISE, "none"), (FULL, "all"),
                                          (FULL, "prefill-discriminator"),
                                          ('{"cudagraph_mode": "NONE"}', "none")])
def test_mtp_residue_4_clean_when_piecewise_or_patched(server, mode, patches):
    _, cold, hit = run_point(server, MTP, mode, patches, 4)
    assert cold["text"] == EXPECTED
    assert hit["text"] == EXPECTED and hit["finish"] == "stop" and hit["cached"] > 0


@pytest.mark.parametrize("mode", ['{"cudagraph_mode": "FULL"}',
                                  '{"cudagraph_mode": "FULL_DECODE_ONLY"}'])
def test_mtp_full_and_full_decode_only_also_break(server, mode):
    _, cold, hit = run_point(server, MTP, mode, "none", 4)
    assert cold["text"] == EXPECTED and len(hit["text"]) <= 1


def _max_block_repeats(text: str) -> int:
    """Occurrences of the most frequent 20-char block (non-overlapping scan)."""
    best = 0
    for i in range(0, max(1, len(text) - 20), 7):
        blk = text[i:i + 20]
        if len(blk) == 20:
            best = max(best, text.count(blk))
    return best


@pytest.mark.parametrize("residue", [7, 8, 9])
def test_dflash7_breaks_residue_8_only_as_repetition(server, residue):
    length, cold, hit = run_point(server, DFLASH7, FULL, "none", residue)
    assert cold["text"] == EXPECTED and cold["finish"] == "stop"
    assert cold["tok_per_step"] > 5
    if residue == 8:
        assert hit["text"] != EXPECTED
        assert _max_block_repeats(hit["text"]) >= 5, hit["text"][:200]
        assert hit["tok_per_step"] is not None and 1.5 <= hit["tok_per_step"] <= 2.6
        assert hit["finish"] == "length"
    else:
        assert hit["text"] == EXPECTED


def test_dflash7_residue_8_clean_with_fix(server):
    _, cold, hit = run_point(server, DFLASH7, FULL, "all", 8)
    assert cold["text"] == hit["text"] == EXPECTED


def test_residue_4_breaks_on_every_hit_other_lengths_do_not(server):
    """The row's staged decode inputs stay stale (a broken request never decodes), so every
    later hit at the residue breaks; a prompt of another length on the same server is fine."""
    srv = server("--speculative-config", MTP, "-cc", FULL, "--patches", "none", *HUGE)
    content, _ = pad_to_residue(srv, build, 4)
    assert measure(srv, content)["text"] == EXPECTED
    assert len(measure(srv, content)["text"]) <= 1
    assert len(measure(srv, content)["text"]) <= 1
    # a different prompt length on the same server is unaffected
    content5, _ = pad_to_residue(srv, build, 5)
    assert measure(srv, content5)["text"] == EXPECTED
