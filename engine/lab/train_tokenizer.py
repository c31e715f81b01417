"""Train the lab model's byte-level BPE tokenizer (run offline; never at boot).

    python -m engine.lab.train_tokenizer [--out engine/lab/model] [--vocab 4096]

The training text is generated here, from word lists and sentence shapes written for this
project (no third-party text), so the tokenizer can be redistributed with the repository.
The output is deterministic for a given ``tokenizers`` version.

Tokenizer shape (what the copy model relies on):
- byte-level BPE (GPT-2 style ``ByteLevel`` pre-tokenizer and decoder), so any UTF-8 text
  round-trips exactly;
- ``\\n`` is isolated before the byte-level split, so every newline is its own token:
  a document line is a whole number of tokens, tokenized the same wherever it appears;
- special tokens ``<|endoftext|>`` (0), ``<|im_start|>`` (1), ``<|im_end|>`` (2), and a
  ChatML chat template in ``tokenizer_config.json``.
"""
from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]

CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)

NOUNS = """time year people way day man thing woman life child world school state family
student group country problem hand part place case week company system program question
work government number night point home water room mother area money story fact month lot
right study book eye job word business issue side kind head house service friend father
power hour game line end member law car city community name president team minute idea kid
body information back parent face others level office door health person art war history
party result change morning reason research girl guy moment air teacher force education
river mountain valley forest garden window table chair letter paper engine server cache
block token request model kernel graph memory buffer queue worker thread process signal
harbor lantern orchard meadow bridge castle island village market station library kitchen
candle mirror ladder basket blanket bottle button compass feather hammer needle pillow
pocket ribbon saddle shovel tunnel wagon whistle anchor barrel cabin canyon cliff coast
desert field glacier hill lake ocean pond prairie reef ridge shore spring stream swamp
cloud storm thunder rain snow frost wind breeze fog mist dawn dusk noon evening season
summer winter autumn apple bread butter cheese honey lemon onion pepper potato rice salt
sugar tomato wheat copper iron silver gold stone glass wood cotton wool leather silk
painter sailor farmer baker tailor miller weaver potter smith hunter keeper pilot doctor
nurse judge clerk guard scholar poet singer dancer builder carpenter merchant traveler
fox wolf bear deer horse sheep goat rabbit owl hawk crow sparrow salmon trout whale seal""".split()

VERBS = """is was has had goes went makes made takes took sees saw comes came knows knew
gets got gives gave finds found thinks thought tells told becomes became leaves left feels
felt brings brought begins began keeps kept holds held writes wrote stands stood hears heard
lets means sets set meets met runs ran pays paid sits sat speaks spoke lies lay leads led
reads grows grew loses lost falls fell sends sent builds built understands understood draws
drew breaks broke spends spent cuts rises rose drives drove buys bought wears wore chooses
chose carries carried opens opened closes closed walks walked waits waited watches watched
follows followed turns turned moves moved lives lived believes believed remembers remembered
copies copied repeats repeated reproduces reproduced returns returned counts counted""".split()

ADJECTIVES = """good new first last long great little own other old right big high different
small large next early young important few public bad same able quiet bright dark warm cold
heavy light narrow wide deep shallow green blue red yellow white black gray golden silver
gentle sudden careful simple plain strange ancient modern quick slow sharp soft rough smooth
clean empty full busy lonely hidden open closed calm wild steady hollow""".split()

ADVERBS = """slowly quickly quietly softly carefully suddenly often always never sometimes
rarely nearly almost gently barely early late again together alone still only""".split()

PREPS = "in on at by with from into over under near across behind beyond through toward".split()
DETS = "the a an this that every each some no one another their his her our its my your".split()
CONJ = "and but so yet or because while when although after before until since".split()
NUMBER_WORDS = ("one two three four five six seven eight nine ten eleven twelve thirteen "
                "fourteen fifteen sixteen seventeen eighteen nineteen twenty").split()
ACCENTED = "café naïve façade résumé déjà vu über straße niño piñata crème brûlée smörgåsbord".split()

INSTRUCTIONS = [
    "Reproduce the first {n} lines of the document below exactly.",
    "Reproduce the first {n} lines of the document above exactly.",
    "Copy the opening {n} lines of the text above verbatim.",
    "Repeat the first {n} lines of the following passage, word for word.",
    "Please write out the first {n} lines of this text exactly as they appear.",
    "Output the top {n} lines of the passage below without any changes.",
    "Return only the first {n} lines of the document, verbatim.",
    "Transcribe the first {n} lines of the poem that follows.",
]


def _sentence(rng: random.Random) -> str:
    words = [rng.choice(DETS), rng.choice(ADJECTIVES), rng.choice(NOUNS), rng.choice(VERBS)]
    if rng.random() < 0.6:
        words += [rng.choice(PREPS), rng.choice(DETS), rng.choice(NOUNS)]
    if rng.random() < 0.3:
        words += [rng.choice(ADVERBS)]
    if rng.random() < 0.3:
        words += [rng.choice(CONJ), rng.choice(DETS), rng.choice(NOUNS), rng.choice(VERBS),
                  rng.choice(ADVERBS)]
    if rng.random() < 0.05:
        words.insert(rng.randrange(len(words)), rng.choice(ACCENTED))
    s = " ".join(words)
    s = s[0].upper() + s[1:]
    return s + rng.choice([".", ".", ".", "!", "?", ";", ",", ":"])


def _line(rng: random.Random) -> str:
    kind = rng.random()
    if kind < 0.55:
        return " ".join(_sentence(rng) for _ in range(rng.randint(1, 2)))
    if kind < 0.65:
        return f"{rng.randint(1, 99)}. {_sentence(rng)}"
    if kind < 0.72:
        return f"- {_sentence(rng)}"
    if kind < 0.80:
        name = rng.choice(NOUNS)
        return (f"    {name}_{rng.choice(NOUNS)} = {rng.randint(0, 4096)}  "
                f"# {rng.choice(ADJECTIVES)} {name}")
    if kind < 0.86:
        return (f"{rng.randint(1900, 2030)}-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}, "
                f"{rng.randint(0, 999999)} {rng.choice(NOUNS)}s at {rng.random() * 100:.2f}%")
    if kind < 0.90:
        return "~" * rng.randint(8, 200)
    if kind < 0.94:
        return f"## {rng.choice(ADJECTIVES).title()} {rng.choice(NOUNS).title()}"
    return " ".join(rng.choice(NOUNS + VERBS + ADJECTIVES) for _ in range(rng.randint(3, 12)))


def _document(rng: random.Random) -> str:
    return "\n".join(_line(rng) for _ in range(rng.randint(3, 30)))


def _chat(rng: random.Random) -> str:
    n = rng.randint(1, 20)
    count = str(n) if rng.random() < 0.5 else NUMBER_WORDS[n - 1]
    instr = rng.choice(INSTRUCTIONS).format(n=count)
    doc = _document(rng)
    if rng.random() < 0.3:
        doc = "```\n" + doc + "\n```"
    user = f"{instr}\n\n{doc}" if rng.random() < 0.5 else f"{doc}\n\n{instr}"
    parts = []
    if rng.random() < 0.3:
        parts.append(f"<|im_start|>system\nYou are a {rng.choice(ADJECTIVES)} assistant.<|im_end|>\n")
    parts.append(f"<|im_start|>user\n{user}<|im_end|>\n<|im_start|>assistant\n")
    answer = "\n".join(doc.split("\n")[:n])
    parts.append(f"{answer}<|im_end|>\n")
    return "".join(parts)


def corpus(seed: int = 0, n_docs: int = 6000):
    rng = random.Random(seed)
    for i in range(n_docs):
        yield _chat(rng) if i % 3 == 0 else _document(rng)


def train(out: Path, vocab_size: int = 4096) -> None:
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE(unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex("\n"), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
    ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, min_frequency=2, special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(corpus(), trainer=trainer)
    out.mkdir(parents=True, exist_ok=True)
    tok.save(str(out / "tokenizer.json"))
    added = {str(tok.token_to_id(t)): {"content": t, "special": True, "lstrip": False,
                                       "rstrip": False, "normalized": False, "single_word": False}
             for t in SPECIAL_TOKENS}
    cfg = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "model_max_length": 262144,
        "bos_token": None,
        "eos_token": "<|im_end|>",
        "pad_token": "<|endoftext|>",
        "unk_token": None,
        "add_bos_token": False,
        "added_tokens_decoder": added,
        "additional_special_tokens": ["<|im_start|>", "<|im_end|>"],
        "chat_template": CHAT_TEMPLATE,
    }
    (out / "tokenizer_config.json").write_text(json.dumps(cfg, indent=2) + "\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path(__file__).parent / "model")
    ap.add_argument("--vocab", type=int, default=4096)
    a = ap.parse_args()
    train(a.out, a.vocab)
    print(f"wrote {a.out}/tokenizer.json and tokenizer_config.json")


if __name__ == "__main__":
    main()
