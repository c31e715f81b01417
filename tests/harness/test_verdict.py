"""Verdicts on crafted answers: the thread's method lessons as tests."""
from harness.judge.verdict import judge, repeats, sha1, verbatim_prefix

from harness.prompts import document_lines

DOC = "\n".join(document_lines(6, seed=3))
EXPECTED = "\n".join(DOC.split("\n")[:3])


def j(answer, **kw):
    return judge(answer, source=DOC, expected=kw.pop("expected", EXPECTED), **kw)


def test_exact_answer_is_ok():
    r = j(EXPECTED, finish_reason="stop")
    assert r.verdict == "ok" and r.verbatim_n == r.verbatim_total == len(EXPECTED)
    assert r.sha1 == sha1(EXPECTED)


def test_empty_and_null_are_broken_not_crash():
    for answer in ("", None):
        r = j(answer, finish_reason="stop")
        assert r.verdict == "broken"
        assert r.sha1 == "da39a3ee5e6b4b0d3255bfef95601890afd80709"
        assert r.verbatim_total == 0 and "empty" in r.reason


def test_one_char_is_broken():
    r = j("T", finish_reason="stop")
    assert r.verdict == "broken" and (r.verbatim_n, r.verbatim_total) == (1, 1)


def test_one_wrong_character_is_diverged_not_broken():
    wrong = EXPECTED[:5] + "X" + EXPECTED[6:]
    r = j(wrong)
    assert r.verdict == "diverged"
    assert r.verbatim_n == 5 and r.verbatim_total == len(wrong)
    assert r.repeats == 1


def test_degenerate_repetition_is_broken():
    answer = DOC.split("\n")[0][:30] + " " * 3
    answer = answer * 20
    r = j(answer, finish_reason="length")
    assert r.verdict == "broken" and "repetition" in r.reason
    assert r.repeats >= 10


def test_refusal_is_diverged_against_the_passage():
    r = j("I'm sorry, but I can't help with reproducing that document.", finish_reason="stop")
    assert r.verdict == "diverged"
    assert r.verbatim_n == 0


def test_cold_reference_by_sha1():
    cold = EXPECTED
    assert judge(cold, source=DOC, reference_sha1=sha1(cold)).verdict == "ok"
    assert judge(cold + "!", source=DOC, reference_sha1=sha1(cold)).verdict == "diverged"
    # the cold phase itself has no reference: only a collapse is detectable
    assert judge("", source=DOC, reference_sha1=None, expected=None).verdict == "broken"
    # ... and nothing says it is right: unjudged, never a silent ok
    assert judge(EXPECTED, source=DOC, reference_sha1=None, expected=None).verdict == "unjudged"


def test_helpers():
    first = DOC.split("\n")[0]
    assert verbatim_prefix(first[:12] + "\x00XYZ", DOC) == 12
    assert repeats("short") == 0
    assert repeats(EXPECTED) == 1


# -- collapse against the reference's length (re-derived from reports/h200/results) ------
H200_EXPECTED = ("The archivist above the long barn was patient after supper, and the cooper "
                 "welcomed the ferryman. " * 3)[:278]


def test_real_bug_b_fragment_is_a_collapse_against_the_reference():
    # vLLM 0.26.0, residue 4, fresh server: ' first frost.' (13 chars, stop), 278 expected
    r = judge(" first frost.", source=H200_EXPECTED, expected=H200_EXPECTED,
              finish_reason="stop")
    assert r.verdict == "broken" and "13 chars of the reference's 278" in r.reason


def test_two_char_cut_is_broken_when_the_reference_is_an_answer():
    cold = EXPECTED  # the reference is the cold answer, not the passage
    r = judge(cold[:2], source=DOC, expected=cold, finish_reason="stop")
    assert r.verdict == "broken"


def test_one_wrong_word_is_diverged_with_its_place():
    words = EXPECTED.split(" ")
    words[3] = "zebra"
    wrong = " ".join(words)
    r = judge(wrong, source=DOC, expected=EXPECTED, finish_reason="stop")
    assert r.verdict == "diverged"
    at = len(" ".join(words[:3])) + 1
    assert f"at char {at}" in r.reason


def test_a_cut_by_max_tokens_is_invalid_not_a_collapse():
    r = judge(EXPECTED[:40], source=DOC, expected=EXPECTED, finish_reason="length")
    assert r.verdict == "invalid" and "--max-tokens" in r.reason
    # the same cut with stop is the engine's own doing
    assert judge(EXPECTED[:40], source=DOC, expected=EXPECTED,
                 finish_reason="stop").verdict == "diverged"
