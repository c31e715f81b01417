"""Residue targeting: prompts whose chat-templated length hits every residue exactly.

Calibrate once per (tokenizer, template, context): pick a padding unit that adds exactly
one templated token per repetition (verified in context, not assumed), size the document
so the unpadded prompt sits just under the context, then build each residue's prompt
arithmetically (same document, ``m`` padding units). Each prompt is verified again where
it is sent (``/tokenize`` on the server, and ``usage.prompt_tokens`` of the answer).

Prompt shape (the lab copy model and the tiny GPU model are trained/built for it, but
neither depends on the exact wording)::

    <instruction: reproduce the first N lines of the document below exactly>

    <document line 1>
    ...
    <document line D>
    <padding: m units>

The warm-up for the ``warm`` phase is the same conversation continued by one more turn,
so it shares the measured prompt's whole templated prefix (DESIGN §2 'warm').
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Iterable, Sequence

from .corpus import document_lines
from ..errors import HandledError

Message = dict[str, str]
CountMany = Callable[[Sequence[Sequence[Message]]], list[int]]
LineCounts = Callable[[Sequence[str]], list[int]]

INSTRUCTION = ("Reproduce the first {n} lines of the document below exactly as written, "
               "and nothing else.")
WARMUP_ASSISTANT = "Understood."
WARMUP_FOLLOWUP = "Thank you. Which of those sentences is the shortest?"
# Tried in order; the first that adds exactly one templated token per repetition, in
# context, wins. Symbols first (a copy model cannot mistake them for prose); common words
# as a fallback for tokenizers that never merged a space into a symbol.
PAD_CANDIDATES = (" ~", " .", " -", " *", " =", " ;", " +", " the", " and", " a", " of")


class PlanError(HandledError, RuntimeError):
    """A residue target that cannot be hit exactly (never silently shifted)."""


@dataclass(frozen=True)
class PromptPlan:
    residue: int
    modulus: int
    target_len: int          # templated length aimed at (≡ residue mod modulus)
    pad_count: int
    messages: tuple[Message, ...]
    warmup_messages: tuple[Message, ...]
    expected: str | None     # the passage a correct answer reproduces verbatim (a prompt
                             # case without "expected" has none)
    document: str            # the source text the answer is judged against
    case_id: str | None = None       # --prompts: the case this prompt is built from
    prompt_sha1: str | None = None   # --prompts: sha1 of the messages as sent
    passage_wins: bool = False       # the case's "expected" judges it whatever --reference

    def as_dict(self) -> dict:
        return {"residue": self.residue, "modulus": self.modulus,
                "target_len": self.target_len, "pad_count": self.pad_count}


@dataclass
class Calibration:
    pad_unit: str
    doc_lines: int
    base_len: int            # templated length with zero padding
    answer_lines: int
    seed: int
    lines: list[str] = field(repr=False, default_factory=list)

    def content(self, pad_count: int) -> str:
        return prompt_content(self.lines[: self.doc_lines], self.answer_lines,
                        self.pad_unit, pad_count)


def prompt_content(lines: Sequence[str], answer_lines: int, pad_unit: str, pad_count: int) -> str:
    """The measured user message: the instruction, the document's lines, the padding."""
    return (INSTRUCTION.format(n=answer_lines) + "\n\n" + "\n".join(lines) + "\n"
            + pad_unit * pad_count)


def _conv(content: str) -> list[Message]:
    return [{"role": "user", "content": content}]


def calibrate(count_many: CountMany, context: int, modulus: int, *, answer_lines: int = 3,
              seed: int = 0, max_len: int | None = None,
              line_counts: LineCounts | None = None) -> Calibration:
    """One calibration per (tokenizer, template, context). ``line_counts`` (a local
    tokenizer's ``line_token_counts``) makes sizing a large document cheap; without it the
    per-line counts are measured through ``count_many``."""
    if context < 64:
        raise PlanError(f"--context {context} is too small (minimum 64 tokens)")
    if modulus < 1:
        raise PlanError("modulus must be positive")
    probe = document_lines(max(answer_lines + 2, 8), seed)
    pad_unit = _pick_pad_unit(count_many, probe, answer_lines, modulus)

    # Size the document. Per-line token counts (short texts, tokenized in one parallel
    # batch) give the estimate; one exact count of the whole prompt confirms it, so the
    # 200k-token document is tokenized whole only a couple of times in all.
    base_target = max(context - modulus // 2, 0)
    head = count_many([_conv(prompt_content(probe[:answer_lines + 1], answer_lines, pad_unit, 0))])[0]
    measure = line_counts or (lambda ls: _per_line(count_many, ls))
    sample = document_lines(64, seed)
    per_line = measure(sample)
    avg = max(sum(per_line) / len(per_line), 1.0)
    want = int((base_target - head) / avg * 1.1) + answer_lines + 32
    lines = document_lines(max(want, answer_lines + 2), seed)
    per_line = measure(lines)
    doc_n, total = 0, head - sum(per_line[:answer_lines + 1])
    for n in per_line:
        if total + n > base_target:
            break
        total += n
        doc_n += 1
    doc_n = max(answer_lines + 1, doc_n)
    base = count_many([_conv(prompt_content(lines[:doc_n], answer_lines, pad_unit, 0))])[0]
    while base > base_target and doc_n > answer_lines + 1:
        drop = 1
        excess = base - base_target
        while drop < doc_n - answer_lines - 1 and sum(per_line[doc_n - drop:doc_n]) < excess:
            drop += 1
        doc_n -= drop
        base = count_many([_conv(prompt_content(lines[:doc_n], answer_lines, pad_unit, 0))])[0]
    cal = Calibration(pad_unit, doc_n, base, answer_lines, seed, lines)
    # Verify arithmetic at both ends of the padding range, in context.
    ends = count_many([_conv(cal.content(1)), _conv(cal.content(modulus - 1))])
    if ends != [base + 1, base + modulus - 1]:
        raise PlanError(f"padding unit {pad_unit!r} is not one token per step in context "
                        f"(base {base}, +1 -> {ends[0]}, +{modulus - 1} -> {ends[1]})")
    if max_len is not None and base + modulus - 1 + 1 > max_len:
        raise PlanError(f"--context {context} does not fit max_model_len {max_len}")
    return cal


def _per_line(count_many: CountMany, lines: Sequence[str]) -> list[int]:
    """Tokens each document line adds to a prompt (its own tokens + its newline),
    measured as the difference between prompts with and without it, in one batch."""
    base = _conv(prompt_content([], 1, " ", 0))
    counts = count_many([base] + [_conv(prompt_content([ln], 1, " ", 0)) for ln in lines])
    return [c - counts[0] for c in counts[1:]]


def _pick_pad_unit(count_many: CountMany, probe: Sequence[str], answer_lines: int,
                   modulus: int) -> str:
    steps = sorted({0, 1, 2, 3, 5, 8, 13, min(modulus, 64), modulus})
    for unit in PAD_CANDIDATES:
        counts = count_many([_conv(prompt_content(probe, answer_lines, unit, m)) for m in steps])
        if all(c - counts[0] == m for c, m in zip(counts, steps)):
            return unit
    raise PlanError("no padding unit adds exactly one templated token per repetition "
                    f"with this tokenizer (tried {', '.join(repr(u) for u in PAD_CANDIDATES)})")


def plan_residue(cal: Calibration, residue: int, modulus: int) -> PromptPlan:
    if not 0 <= residue < modulus:
        raise PlanError(f"residue {residue} is outside 0..{modulus - 1}")
    pad = (residue - cal.base_len) % modulus
    content = cal.content(pad)
    messages = tuple(_conv(content))
    warmup = messages + ({"role": "assistant", "content": WARMUP_ASSISTANT},
                         {"role": "user", "content": WARMUP_FOLLOWUP})
    doc_lines = cal.lines[: cal.doc_lines]
    return PromptPlan(residue=residue, modulus=modulus, target_len=cal.base_len + pad,
                      pad_count=pad, messages=messages, warmup_messages=warmup,
                      expected="\n".join(doc_lines[: cal.answer_lines]),
                      document="\n".join(doc_lines))


def plan(count_many: CountMany, residues: Iterable[int], *, context: int, modulus: int,
         answer_lines: int = 3, seed: int = 0, verify: bool = False,
         max_len: int | None = None, line_counts: LineCounts | None = None) -> list[PromptPlan]:
    cal = calibrate(count_many, context, modulus, answer_lines=answer_lines, seed=seed,
                    max_len=max_len, line_counts=line_counts)
    plans = [plan_residue(cal, r, modulus) for r in residues]
    if verify and plans:
        measured = count_many([list(p.messages) for p in plans])
        for p, n in zip(plans, measured):
            if n != p.target_len:
                raise PlanError(f"residue {p.residue}: built {n} tokens, aimed at {p.target_len}")
    return plans


def own_document_plan(cal: Calibration, count_many: CountMany, residue: int, modulus: int,
                      seed: int) -> PromptPlan:
    """A prompt on a document of its own (``sweep --url``): the calibration's layout and
    size, the lines of document ``seed``, and a tag naming that seed at the very start of
    the message, so no block of this prompt (from the first) is shared with any other
    point's prompt. Costs one count (this document, no padding); the padding then hits
    ``residue`` exactly because the calibration verified one token per padding unit (the
    point's own ``/tokenize`` checks it again where it is sent)."""
    if not 0 <= residue < modulus:
        raise PlanError(f"residue {residue} is outside 0..{modulus - 1}")
    lines = document_lines(cal.doc_lines, seed)
    head = f"Document {seed:08x}. "

    def content(pad: int) -> str:
        return head + prompt_content(lines, cal.answer_lines, cal.pad_unit, pad)

    base = count_many([_conv(content(0))])[0]
    pad = (residue - base) % modulus
    messages = tuple(_conv(content(pad)))
    warmup = messages + ({"role": "assistant", "content": WARMUP_ASSISTANT},
                         {"role": "user", "content": WARMUP_FOLLOWUP})
    return PromptPlan(residue=residue, modulus=modulus, target_len=base + pad, pad_count=pad,
                      messages=messages, warmup_messages=warmup,
                      expected="\n".join(lines[: cal.answer_lines]), document="\n".join(lines))


def approx_line_counts(count_many: CountMany) -> LineCounts:
    """Per-line token counts from two counts (all the lines together, and none), shared
    out by characters: for a tokenizer reached over HTTP, where one request per line is
    too many. ``calibrate`` only estimates with them; its exact counts decide."""
    def counts(lines: Sequence[str]) -> list[int]:
        empty, full = count_many([_conv(prompt_content([], 1, " ", 0)),
                                  _conv(prompt_content(list(lines), 1, " ", 0))])
        total = max(full - empty, 0)
        chars = [len(ln) + 1 for ln in lines]
        scale = total / max(sum(chars), 1)
        return [max(1, round(c * scale)) for c in chars]
    return counts
