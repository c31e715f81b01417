"""first_divergence: char, token, margin, the call and vLLM's top-k rule."""
from harness.judge.divergence import NEAR_TIE_MARGIN, first_divergence


def toks(words, margin=3.0, alts=None):
    """Token entries [token, logprob, alts] whose top-1 beats top-2 by ``margin``."""
    out = []
    for i, w in enumerate(words):
        alt = (alts or {}).get(i, "zz")
        out.append([w, -0.1, [[w, -0.1], [alt, -0.1 - margin]]])
    return out


REF = ["The", " cat", " sat", " on", " the", " mat"]


def test_char_only_without_tokens():
    d = first_divergence("The dog sat", "The cat sat")
    assert d["char"] == 4 and d["expected"].startswith("cat") and d["got"].startswith("dog")
    assert d["token"] is None and d["margin"] is None and d["call"] == "unknown"
    assert d["in_top_k"] is None
    assert first_divergence("same", "same") is None
    assert first_divergence("x", None) is None


def test_decisive_break_against_the_reference_tokens():
    got = ["The", " dog", " sat", " on", " the", " mat"]
    d = first_divergence("".join(got), "".join(REF), answer_tokens=toks(got),
                         reference_tokens=toks(REF))
    assert d["token"] == 1 and d["got_token"] == " dog" and d["expected_token"] == " cat"
    assert d["margin"] == 3.0 and d["margin_from"] == "reference"
    # ' dog' is not among the reference's alternatives: vLLM's rule says not close
    assert d["call"] == "decisive" and d["in_top_k"] is False


def test_near_tie_is_what_vllms_rule_accepts():
    got = ["The", " dog", " sat"]
    ref = toks(REF[:3], margin=NEAR_TIE_MARGIN / 5, alts={1: " dog"})
    ans = toks(got, margin=0.05, alts={1: " cat"})
    d = first_divergence("".join(got), "".join(REF[:3]), answer_tokens=ans,
                         reference_tokens=ref)
    assert d["call"] == "near-tie" and d["in_top_k"] is True
    assert abs(d["margin"] - NEAR_TIE_MARGIN / 5) < 1e-9


def test_the_answers_own_margin_calls_nothing():
    # issue 23 item 7: a corrupted answer's own top-1 lead says nothing about noise; it
    # is recorded (margin_from: answer), the call is unknown, small or large
    got = ["The", " dog", " sat"]
    for margin in (0.2, 4.0):
        d = first_divergence("".join(got), "The cat sat", answer_tokens=toks(got, margin=margin))
        assert d["token"] == 1 and d["margin_from"] == "answer" and d["margin"] == margin
        assert d["call"] == "unknown" and d["in_top_k"] is None


def test_an_empty_answer_takes_the_clean_references_margin_at_token_0():
    ref = ["The", " cat", " sat"]
    d = first_divergence("", "".join(ref), answer_tokens=[],
                         reference_tokens=toks(ref, margin=3.0))
    assert d["token"] == 0 and d["margin_from"] == "reference" and d["call"] == "decisive"
