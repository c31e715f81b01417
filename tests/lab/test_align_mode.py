"""``--mamba-cache-mode align`` through HTTP on real lab processes: upstream vLLM 0.26.0's
hybrid, where Bug B fires cold (the prefill's last chunk is len mod 128 tokens), and the
effective values the harness records from ``/version``."""
from __future__ import annotations

import pytest

from labserver import FULL, HUGE, MTP, make_document, pad_to_residue, padding

DOC = make_document(40)
EXPECTED = "\n".join(DOC[:5])


def build(n: int) -> str:
    return ("Reproduce the first 5 lines of the document below exactly.\n\n"
            + "\n".join(DOC) + "\n" + padding(n))


@pytest.mark.parametrize("residue,patches,broken", [(4, "none", True), (5, "none", False),
                                                    (4, "all", False)])
def test_align_mode_breaks_cold_at_k_plus_1(server, residue, patches, broken):
    srv = server("--speculative-config", MTP, "-cc", FULL, "--patches", patches, *HUGE,
                 "--mamba-cache-mode", "align")
    # the stale state a cold break reads is per process (engine/lab/poison.py) until filled:
    # filled as the harness does by default, the break's answer is the same on every run
    srv.poison()
    content, length = pad_to_residue(srv, build, residue)
    assert length % 128 == residue and length < 2048
    out = srv.chat(content, max_tokens=600)
    text = out["choices"][0]["message"]["content"] or ""
    assert out["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
    if broken:
        assert len(text) <= 1 and out["choices"][0]["finish_reason"] == "stop", text
    else:
        assert text == EXPECTED


def test_version_and_boot_log_report_the_effective_mode(server):
    srv = server("--speculative-config", MTP, *HUGE, "--mamba-cache-mode", "align")
    eff = srv.http.get("/version").json()["effective_config"]
    assert eff["mamba_cache_mode"] == "align"
    assert eff["mamba_block_size"] == 2048 and eff["drop_eagle_block"] is True
    assert "mamba_cache_mode=align" in srv.log()
    default = server("--speculative-config", MTP, *HUGE)
    eff = default.http.get("/version").json()["effective_config"]
    assert (eff["mamba_cache_mode"], eff["mamba_block_size"], eff["drop_eagle_block"]) == \
        ("all", None, False)
