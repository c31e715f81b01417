"""Verdicts on crafted answers: the thread's method lessons as tests."""
from harness.verdict import judge, repeats, sha1, verbatim_prefix

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
    assert judge(EXPECTED, source=DOC, reference_sha1=None, expected=None).verdict == "ok"


def test_helpers():
    first = DOC.split("\n")[0]
    assert verbatim_prefix(first[:12] + "\x00XYZ", DOC) == 12
    assert repeats("short") == 0
    assert repeats(EXPECTED) == 1
