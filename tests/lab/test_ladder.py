"""The thread's ladder, for the right reason: in the hybrid geometry a prefix-cache hit
needs a recurrent-state snapshot, and without --prefix-match-unit snapshots exist only at
page-block boundaries (2176 tokens at dflash k=7), so the tail is len mod 2176, not
len mod 128. The bug is still there -- at len ≡ 8 (mod 2176)."""
from __future__ import annotations

from labserver import DFLASH7, FULL, MTP, make_document, pad_to_residue, padding

DOC = make_document(40)
LONG_DOC = make_document(90)
N = 4


def build(doc):
    def b(n: int) -> str:
        return (f"Copy the first {N} lines of the document below exactly.\n\n"
                + "\n".join(doc) + "\n" + padding(n))
    return b


def self_hit(srv, content):
    cold = srv.chat(content, max_tokens=400)
    hit = srv.chat(content, max_tokens=400)
    return cold, hit


def text(out):
    return out["choices"][0]["message"]["content"] or ""


def cached(out):
    return out["usage"]["prompt_tokens_details"]["cached_tokens"]


COMMON = ["--speculative-config", DFLASH7, "-cc", FULL, "--patches", "none",
          "--enable-prefix-caching", "--enable-prompt-tokens-details"]


def test_block16_no_unit_clean_at_residue_8(server):
    srv = server(*COMMON, "--block-size", "16")
    content, length = pad_to_residue(srv, build(DOC), 8)
    cold, hit = self_hit(srv, content)
    expected = "\n".join(DOC[:N])
    assert text(cold) == text(hit) == expected
    assert cached(hit) == 0  # shorter than one page block: no state snapshot to resume from


def test_block128_no_unit_clean_at_residue_8(server):
    srv = server(*COMMON, "--block-size", "128")
    assert srv.http.get("/version").json()["effective_config"]["effective_hash_unit"] == 2176
    content, length = pad_to_residue(srv, build(DOC), 8)
    cold, hit = self_hit(srv, content)
    assert text(cold) == text(hit) == "\n".join(DOC[:N])
    assert cached(hit) == 0


def test_block128_unit128_broken_at_residue_8(server):
    srv = server(*COMMON, "--block-size", "128", "--prefix-match-unit", "128")
    content, length = pad_to_residue(srv, build(DOC), 8)
    cold, hit = self_hit(srv, content)
    assert text(cold) == "\n".join(DOC[:N])
    assert text(hit) != text(cold)
    assert cached(hit) == length - 8


def test_block128_no_unit_bug_hides_at_page_block_residue(server):
    """Without the unit the same bug fires at len ≡ 8 (mod 2176): a mod-128 sweep of short
    prompts cannot see it."""
    srv = server(*COMMON, "--block-size", "128")
    content, length = pad_to_residue(srv, build(LONG_DOC), 8, modulus=2176, minimum=2177)
    assert length % 2176 == 8 and length > 2176
    cold, hit = self_hit(srv, content)
    assert text(cold) == "\n".join(LONG_DOC[:N])
    assert cached(hit) == length - 8
    assert text(hit) != text(cold)


def test_mtp_page_block_is_2048(server):
    srv = server("--speculative-config", MTP, "--enable-prefix-caching", "--block-size", "128")
    eff = srv.http.get("/version").json()["effective_config"]
    assert eff["page_block"] == 2048 and eff["effective_hash_unit"] == 2048


def test_dense_geometry_aligns_hits_to_block(server):
    srv = server(*COMMON, "--block-size", "128", "--geometry", "dense")
    eff = srv.http.get("/version").json()["effective_config"]
    assert eff["page_block"] is None and eff["effective_hash_unit"] == 128
    content, length = pad_to_residue(srv, build(DOC), 8)
    cold, hit = self_hit(srv, content)
    assert cached(hit) == length - 8
    assert text(cold) == "\n".join(DOC[:N]) != text(hit)


def test_dense_hits_with_short_tails_are_clean_without_the_bug(server):
    """Dense geometry has no state snapshot: a hit whose tail no longer contains the
    assistant header must still answer (the model reads the cached prefix's slots)."""
    srv = server("--speculative-config", MTP, "-cc", '{"cudagraph_mode": "PIECEWISE"}',
                 "--patches", "none", "--enable-prefix-caching", "--block-size", "128",
                 "--geometry", "dense", "--enable-prompt-tokens-details")
    expected = "\n".join(DOC[:N])
    for residue in (1, 2, 3, 4, 5):
        content, length = pad_to_residue(srv, build(DOC), residue)
        srv.http.post("/reset_prefix_cache")
        cold, hit = self_hit(srv, content)
        assert cached(hit) == length - residue
        assert text(cold) == text(hit) == expected, residue
