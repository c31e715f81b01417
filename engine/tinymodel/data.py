"""Training/eval conversations in the harness's exact prompt shape.

One user message built by ``engine.prompts.prompt_content`` (instruction line, blank
line, document lines, padding run), ChatML-templated, then the assistant answer = the
first N document lines joined by "\\n", then ``<|im_end|>``. Loss is on the answer
tokens and ``<|im_end|>`` only.
"""
from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Sequence

from engine.prompts import PAD_CANDIDATES, corpus_lines, prompt_content

# Document seeds: training draws from TRAIN_SEEDS; fresh-prompt evaluation uses seeds the
# trainer never sees (the harness's own default seed 0 is in the eval range).
TRAIN_SEEDS = (1_000, 10_000_000)
EVAL_SEEDS = (0, 1_000)
TOKENS_PER_LINE = 17  # measured mean with the tiny tokenizer (templated, incl. "\n")


def doc_lines(seed: int, count: int) -> list[str]:
    """Same lines as ``document_lines(count, seed)`` (the corpus is prefix-stable), without
    generating a 1,024-line chunk per call."""
    return list(corpus_lines(seed, count))


@dataclass(frozen=True)
class Sample:
    messages: tuple[dict, ...]
    answer: str
    n: int
    doc_lines: int
    pad_unit: str
    pad_count: int
    seed: int


def make_sample(rng: random.Random, max_lines: int, max_pad: int, *,
                seeds: tuple[int, int] = TRAIN_SEEDS, n: int | None = None) -> Sample:
    if n is None:
        n = 3 if rng.random() < 0.7 else rng.randint(1, 5)
    lo = n + 1
    d = rng.randint(lo, max(lo, max_lines))
    r = rng.random()
    unit = " ~" if r < 0.45 else (" the" if r < 0.8 else rng.choice(PAD_CANDIDATES))
    pad = rng.randint(0, max_pad)
    seed = rng.randrange(*seeds)
    lines = doc_lines(seed, d)
    content = prompt_content(lines, n, unit, pad)
    return Sample(({"role": "user", "content": content},), "\n".join(lines[:n]), n, d,
                  unit, pad, seed)


def encode(chat, samples: Sequence[Sample], eos_id: int) -> list[tuple[list[int], int]]:
    """Token ids of prompt+answer+<|im_end|> and the prompt length, per sample.
    ``chat`` is a ``engine.prompts.ChatTokenizer``."""
    prompts = [chat.render(s.messages, add_generation_prompt=True) for s in samples]
    enc_p = chat.tokenizer.encode_batch(prompts, add_special_tokens=False)
    enc_a = chat.tokenizer.encode_batch([s.answer for s in samples], add_special_tokens=False)
    return [(p.ids + a.ids + [eos_id], len(p.ids)) for p, a in zip(enc_p, enc_a)]


# Curriculum: (max templated prompt tokens, max document lines, max padding units).
STAGES = (
    (128, 5, 12),
    (256, 12, 40),
    (512, 26, 130),
    (1024, 56, 130),
    (1536, 86, 130),
)
