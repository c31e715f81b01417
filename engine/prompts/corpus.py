"""The shipped corpus: deterministic, original text written for this project (MIT).

Lines are generated from word lists by a seeded grammar, so a document of any length
(a 200k-token context included) is available without shipping megabytes, every line is
unique (a copy model is never ambiguous about where it is), and nothing in it is anyone
else's text. The words "line"/"lines" and digits never appear in it, so no document line
can be mistaken for the instruction.
"""
from __future__ import annotations

import random
from functools import lru_cache

_ADJ = ("amber", "quiet", "northern", "brittle", "patient", "hollow", "silver", "crooked",
        "gentle", "restless", "narrow", "ancient", "humble", "scarlet", "distant", "careful",
        "weathered", "bright", "sleepy", "copper", "tangled", "solemn", "windward", "mossy",
        "lonely", "eager", "faded", "stubborn", "woolen", "misty", "golden", "plain")
_NOUN = ("lighthouse", "ferryman", "orchard", "harbour", "lantern", "shepherd", "meadow",
         "archivist", "granary", "kestrel", "bridge", "weaver", "cellar", "ridge", "postman",
         "canal", "beekeeper", "chapel", "quarry", "sailmaker", "valley", "clockmaker",
         "reef", "miller", "observatory", "stable", "cartographer", "thicket", "ledger",
         "foundry", "heron", "cooper")
_VERB = ("watched", "mended", "counted", "carried", "followed", "painted", "measured",
         "guarded", "gathered", "answered", "crossed", "remembered", "polished", "traced",
         "welcomed", "repaired", "sheltered", "noticed", "described", "weighed")
_PREP = ("beside", "beneath", "beyond", "behind", "across", "along", "toward", "above",
         "near", "past")
_PLACE = ("the old road", "the salt marsh", "the eastern wall", "the frozen pond",
          "the market square", "the river mouth", "the hill fort", "the birch wood",
          "the tide pools", "the stone steps", "the empty pier", "the chalk cliffs",
          "the long barn", "the village well", "the north gate", "the rye fields")
_TIME = ("at dawn", "before the storm", "after supper", "in the autumn rain",
         "long past midnight", "while the bells rang", "as the fog lifted",
         "during the harvest", "on the first frost", "when the tide turned",
         "in early spring", "under a pale moon")
_CLOSE = ("and said nothing of it", "and wrote it down twice", "without a word",
          "as if it mattered", "and then went home", "with great care",
          "for the third time", "and kept the key", "until the candles burned low",
          "though nobody asked")

_SHAPES = (
    "The {a} {n} {v} the {a2} {n2} {p} {pl} {t}.",
    "{T}, the {a} {n} {v} a {a2} {n2} {c}.",
    "A {a} {n} {v} the {n2} {p} {pl}, {c}.",
    "Near {pl}, the {n} {v} every {a} {n2} {t}.",
    "The {n} {p} {pl} was {a} {t}, and the {n2} {v} it {c}.",
)


def _line(rng: random.Random) -> str:
    t = rng.choice(_TIME)
    return rng.choice(_SHAPES).format(
        a=rng.choice(_ADJ), a2=rng.choice(_ADJ), n=rng.choice(_NOUN), n2=rng.choice(_NOUN),
        v=rng.choice(_VERB), p=rng.choice(_PREP), pl=rng.choice(_PLACE), t=t,
        T=t[0].upper() + t[1:], c=rng.choice(_CLOSE))


@lru_cache(maxsize=8)
def corpus_lines(seed: int, count: int) -> tuple[str, ...]:
    """Exactly the first ``count`` lines of ``seed``'s document (prefix-stable: more lines
    never change the earlier ones); ``document_lines`` rounds up and caches by chunk."""
    rng = random.Random(seed)
    seen: set[str] = set()
    out: list[str] = []
    while len(out) < count:
        line = _line(rng)
        if line not in seen:
            seen.add(line)
            out.append(line)
    return tuple(out)


def document_lines(count: int, seed: int = 0) -> list[str]:
    """The first ``count`` lines of the corpus document for ``seed`` (stable forever:
    results recorded today must be reproducible from the seed tomorrow)."""
    # Generate in chunks so growing a document never changes its earlier lines.
    chunk = 1024
    total = ((count + chunk - 1) // chunk) * chunk
    return list(corpus_lines(seed, max(total, chunk))[:count])
