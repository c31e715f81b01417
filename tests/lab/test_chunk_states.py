"""vllm PR #34587 on the lab (engine/lab/mamba_chunks.py), over HTTP against a real lab
process: in ``--mamba-cache-mode all`` a prefill chunk that starts inside a state block
leaves the block it crosses with a state short of its end, and the block is cached anyway;
a later hit on that prefix resumes from it. Broken with ``--patches none``, clean with
``mamba-chunk-grid`` and with ``all``; a lone request under a budget that is a multiple of
the hash unit (history ``none``) never starts a chunk inside a block: unchanged.
"""
from __future__ import annotations

import re

import pytest

from engine.lab.mamba_chunks import kernel_chunk_ends
from labserver import HUGE, MTP, pad_to_residue
from test_histories import EXPECTED, _answer, _content, _sibling_step

ALL_MODE = [*HUGE, "--speculative-config", MTP, "--mamba-cache-mode", "all"]


def test_kernel_chunks_counted_from_the_grid_or_from_the_chunk_start():
    assert kernel_chunk_ends(300, 700, 128, on_grid=True) == [384, 512, 640, 700]
    assert kernel_chunk_ends(300, 700, 128, on_grid=False) == [428, 556, 684, 700]
    assert kernel_chunk_ends(256, 700, 128, on_grid=False) \
        == kernel_chunk_ends(256, 700, 128, on_grid=True) == [384, 512, 640, 700]


def _text(resp: dict) -> str:
    return resp["choices"][0]["message"]["content"] or ""


def _cached(resp: dict) -> int:
    return resp["usage"]["prompt_tokens_details"]["cached_tokens"]


@pytest.mark.parametrize("patches,broken", [("none", True), ("mamba-chunk-grid", False),
                                            ("all", False)])
def test_sibling_splits_the_measured_prefill_and_its_self_hit_reads_a_partial_state(
        server, patches, broken):
    """Budget 8192, two ~4.1k prompts in one step: the measured row (second) gets
    8192 - L(sibling) tokens, an end inside a 128-token block; its next chunk starts
    there. The block it crosses keeps the state at that end and is cached as the state at
    its own end; the self-hit (4096 = L - 5) resumes from it and answers ''."""
    srv = server(*ALL_MODE, "--max-num-batched-tokens", "8192", "--patches", patches)
    sib, ls = pad_to_residue(srv, lambda n: _content(130, n, head="Sibling. "), 5, minimum=4096)
    measured, lm = pad_to_residue(srv, lambda n: _content(130, n), 5, minimum=4096)
    first, second = _sibling_step(srv, sib, measured)
    assert _text(first) == _text(second) == EXPECTED   # the running states are exact
    split = 8192 - ls
    assert 0 < split < lm and split % 128   # the budget split the measured prefill mid-block
    assert re.search(rf"prefill chunk: request=chatcmpl-rl-m start=0 tokens={split} of={lm} "
                     rf"step=1 ", srv.log())
    assert re.search(rf"prefill chunk: request=chatcmpl-rl-m start={split} tokens={lm - split} "
                     rf"of={lm} step=2 ", srv.log())
    again = _answer(srv, measured, "rl-m2")
    assert _cached(again) == lm - 5 > split   # the hit's block was crossed by chunk 2
    if broken:
        assert _text(again) == "" and again["choices"][0]["finish_reason"] == "stop"
    else:
        assert _text(again) == EXPECTED


@pytest.mark.parametrize("lines", [130, 420])   # one chunk; two (8192 + the rest)
def test_history_none_is_unchanged_under_a_budget_on_the_grid(server, lines):
    srv = server(*ALL_MODE, "--max-num-batched-tokens", "8192", "--patches", "none")
    content, length = pad_to_residue(srv, lambda n: _content(lines, n), 5, minimum=4096)
    assert (length > 8192) == (lines > 130)
    cold = _answer(srv, content, "rl-c")
    hit = _answer(srv, content, "rl-h")
    assert _text(cold) == _text(hit) == EXPECTED and _cached(hit) == length - 5


@pytest.mark.parametrize("patches,broken", [("none", True), ("all", False)])
def test_a_budget_off_the_grid_breaks_a_lone_self_hit(server, patches, broken):
    """PR #34587's own repro: one request, chunks of 3000 (not a multiple of 128), then
    the same prompt again. This is history ``none`` under such a budget."""
    srv = server(*ALL_MODE, "--max-num-batched-tokens", "3000", "--patches", patches)
    content, length = pad_to_residue(srv, lambda n: _content(130, n), 5, minimum=4096)
    assert _text(_answer(srv, content, "rl-c")) == EXPECTED
    hit = _answer(srv, content, "rl-h")
    assert _cached(hit) == length - 5
    assert (_text(hit) == "") == broken and (_text(hit) == EXPECTED) != broken
