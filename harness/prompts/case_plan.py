"""Residue targeting for a user's prompt case: the same padding unit rule as the document
prompts (``planner``), applied to the message the case names.

Per (tokenizer, case, modulus): pick the first padding unit that adds exactly one
templated token per repetition *to this message, in this conversation* (verified on the
counter: the local tokenizer and chat template, or the server's ``/tokenize``), then build
each residue's messages arithmetically (``m`` units appended to the padded message) and
count every one of them again: a case that cannot hit a residue exactly is a
``PlanError`` naming the case, never a shifted target.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Sequence

from ..errors import HandledError
from .cases import PromptCase
from engine.prompts.planner import (PAD_CANDIDATES, WARMUP_ASSISTANT, WARMUP_FOLLOWUP, CountMany,
                      PlanError, PromptPlan)
from engine.prompts.templating import TemplateError

__all__ = ["CaseCalibration", "CaseTooLong", "calibrate_case", "plan_case", "plan_case_residues",
           "prompt_sha1", "case_source"]


def prompt_sha1(messages: Sequence[dict]) -> str:
    """The identity of a prompt as sent: sha1 of its canonical JSON (golden answers of
    prompt cases are keyed by it)."""
    blob = json.dumps(list(messages), ensure_ascii=False, sort_keys=True)
    return hashlib.sha1(blob.encode("utf-8")).hexdigest()


def case_source(messages: Sequence[dict]) -> str:
    """The text an answer can copy from (what ``verbatim n/N`` is measured against): every
    message's text, in order."""
    out = []
    for m in messages:
        c = m.get("content")
        if isinstance(c, str):
            out.append(c)
        elif isinstance(c, list):
            out += [p["text"] for p in c if isinstance(p, dict) and isinstance(p.get("text"), str)]
    return "\n".join(out)


@dataclass(frozen=True)
class CaseCalibration:
    case: PromptCase
    pad_unit: str
    base_len: int            # templated length of the case as given (zero padding)


class CaseTooLong(HandledError, PlanError):
    """A case longer than the limit before any padding; ``tokens``: its templated length."""

    def __init__(self, tokens: int) -> None:
        super().__init__(f"{tokens} templated tokens")
        self.tokens = tokens


def _name(case: PromptCase) -> str:
    return f"case {case.id!r} (line {case.line})"


def _count(case: PromptCase, count_many: CountMany, convs: list[list[dict]]) -> list[int]:
    import jinja2   # here: start-up cost paid by every sweep process (loaded by now if rendered)
    try:
        return count_many(convs)
    except PlanError as e:
        raise PlanError(f"{_name(case)}: {e}") from None
    except (jinja2.TemplateError, TemplateError, TypeError, KeyError) as e:
        raise PlanError(f"{_name(case)}: the chat template cannot render it: "
                        f"{type(e).__name__}: {e}") from None


def calibrate_case(case: PromptCase, count_many: CountMany, modulus: int, *,
                   limit: int | None = None) -> CaseCalibration:
    """The padding unit for this case's padded message, verified at the ends and in the
    middle of the padding range (the plan counts every residue's prompt again).
    ``limit``: the most templated tokens a case may have; the case as written is counted
    once against it first (a 2 MB case took 86 s of calibration counts before "exceeds
    max_model_len", issue 27)."""
    if modulus < 1:
        raise PlanError("modulus must be positive")
    if limit is not None:
        (n,) = _count(case, count_many, [case.padded(PAD_CANDIDATES[0], 0)])
        if n > limit:
            raise CaseTooLong(n)
    steps = sorted({0, 1, 2, 3, 5, 8, 13, min(modulus - 1, 64), modulus - 1})
    tried = []
    for unit in PAD_CANDIDATES:
        counts = _count(case, count_many, [case.padded(unit, m) for m in steps])
        if all(c - counts[0] == m for c, m in zip(counts, steps)):
            return CaseCalibration(case, unit, counts[0])
        tried.append(repr(unit))
    raise PlanError(f"{_name(case)}: no padding unit adds exactly one templated token per "
                    f"repetition to {case.describe_pad()} (tried {', '.join(tried)}): it "
                    "cannot hit every residue exactly; pad another message with \"pad\"")


def plan_case(cal: CaseCalibration, residue: int, modulus: int) -> PromptPlan:
    if not 0 <= residue < modulus:
        raise PlanError(f"residue {residue} is outside 0..{modulus - 1}")
    case = cal.case
    pad = (residue - cal.base_len) % modulus
    messages = tuple(case.padded(cal.pad_unit, pad))
    warmup = messages + ({"role": "assistant", "content": WARMUP_ASSISTANT},
                         {"role": "user", "content": WARMUP_FOLLOWUP})
    return PromptPlan(residue=residue, modulus=modulus, target_len=cal.base_len + pad,
                      pad_count=pad, messages=messages, warmup_messages=warmup,
                      expected=case.expected, document=case_source(messages),
                      case_id=case.id, prompt_sha1=prompt_sha1(messages),
                      passage_wins=case.expected is not None)


def plan_case_residues(cal: CaseCalibration, residues: Sequence[int], modulus: int,
                       count_many: CountMany) -> list[PromptPlan]:
    """Every residue's prompt, each counted again: a miss names the case and residue."""
    plans = [plan_case(cal, r, modulus) for r in residues]
    measured = _count(cal.case, count_many, [list(p.messages) for p in plans])
    for p, n in zip(plans, measured):
        if n != p.target_len:
            raise PlanError(f"{_name(cal.case)}: residue {p.residue} cannot be hit exactly: "
                            f"{p.pad_count} x {cal.pad_unit!r} in {cal.case.describe_pad()} "
                            f"gives {n} templated tokens, aimed at {p.target_len}")
    return plans
