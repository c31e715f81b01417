"""Every residue 0..127 hits its target exactly, verified by an independent count."""
import pytest

from harness.prompts import ChatTokenizer, PlanError, calibrate, plan, plan_residue
from tests.conftest import FIXTURES


@pytest.fixture(scope="module")
def tok():
    return ChatTokenizer.from_dir(FIXTURES / "tokenizer")


@pytest.mark.parametrize("context", [1500, 6000])
def test_every_residue_hits_exactly(tok, context):
    plans = plan(tok.count_many, range(128), context=context, modulus=128)
    measured = tok.count_many([list(p.messages) for p in plans])
    for p, n in zip(plans, measured):
        assert n == p.target_len, (p.residue, n, p.target_len)
        assert n % 128 == p.residue
        assert abs(n - context) <= 128
    # one document for all residues: only the padding differs
    assert len({p.document for p in plans}) == 1
    assert all(p.expected == "\n".join(p.document.split("\n")[:3]) for p in plans)


def test_other_modulus_and_answer_lines(tok):
    plans = plan(tok.count_many, [0, 5, 63], context=2000, modulus=64, answer_lines=5,
                 verify=True)
    assert [p.target_len % 64 for p in plans] == [0, 5, 63]
    assert plans[0].expected.count("\n") == 4


def test_warmup_shares_the_measured_prompt(tok):
    cal = calibrate(tok.count_many, 1200, 128)
    p = plan_residue(cal, 4, 128)
    measured = tok.render(p.messages)
    warm = tok.render(p.warmup_messages, add_generation_prompt=False)
    assert warm.startswith(measured)


def test_padding_unit_is_verified_not_assumed(tok):
    # A tokenizer that merges every pair of padding units into one token: no candidate
    # adds exactly one token per step, and the planner must say so rather than guess.
    def merging(convs):
        out = []
        for c in convs:
            pad_line = c[0]["content"].rsplit("\n", 1)[-1]
            units = len(pad_line.split())
            out.append(tok.count(c) - units // 2)
        return out
    with pytest.raises(PlanError, match="one templated token"):
        calibrate(merging, 1500, 128)


def test_context_too_small_is_an_error(tok):
    with pytest.raises(PlanError):
        calibrate(tok.count_many, 10, 128)
