"""Templated length: what the server will count, computed locally.

The source of truth is the server's ``/tokenize`` with chat ``messages``; this is the
local fallback and the fast planner: a Hugging Face ``tokenizers`` tokenizer plus the
chat template from ``tokenizer_config.json``, rendered with Jinja2 the way transformers
renders it (``messages``, ``add_generation_prompt``, special-token variables).
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

if TYPE_CHECKING:
    from tokenizers import Tokenizer

Message = dict[str, str]


class TemplateError(RuntimeError):
    """The model directory has no usable tokenizer or chat template. The harness reports it
    as a sweep that cannot run (``harness.errors.CannotRun``, exit 3: ``residue_sweep``),
    unless a caller gives it context (a prompt case's ``PlanError``)."""


def _token_text(value: Any) -> str | None:
    if isinstance(value, dict):  # {"content": "<|im_end|>", ...}
        return value.get("content")
    return value


@dataclass
class ChatTokenizer:
    tokenizer: Tokenizer
    chat_template: str
    special: dict[str, str | None]
    source: str

    @classmethod
    def from_dir(cls, model_dir: str | Path) -> "ChatTokenizer":
        d = Path(model_dir)
        tok_path, cfg_path = d / "tokenizer.json", d / "tokenizer_config.json"
        if not tok_path.is_file():
            raise TemplateError(f"no tokenizer.json in {d}")
        cfg = json.loads(cfg_path.read_text()) if cfg_path.is_file() else {}
        template = cfg.get("chat_template")
        jinja_file = d / "chat_template.jinja"
        if template is None and jinja_file.is_file():
            template = jinja_file.read_text()
        if isinstance(template, list):  # [{"name": "default", "template": ...}, ...]
            template = next((t["template"] for t in template if t.get("name") == "default"),
                            template[0]["template"])
        if not template:
            raise TemplateError(f"no chat_template in {cfg_path} or {jinja_file}")
        special = {k: _token_text(cfg.get(k)) for k in
                   ("bos_token", "eos_token", "pad_token", "unk_token")}
        # here, not at the top: start-up cost paid by every sweep process, most of which
        # (usage errors, --help, --version) load no tokenizer
        from tokenizers import Tokenizer
        return cls(Tokenizer.from_file(str(tok_path)), template, special, str(d))

    def __post_init__(self) -> None:
        import jinja2.sandbox   # here: start-up cost paid by every sweep process (jinja2 ~40 ms)
        env = jinja2.sandbox.ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
        env.globals["raise_exception"] = _raise
        self._template = env.from_string(self.chat_template)

    def render(self, messages: Sequence[Message], add_generation_prompt: bool = True) -> str:
        return self._template.render(messages=list(messages),
                                     add_generation_prompt=add_generation_prompt,
                                     **{k: v or "" for k, v in self.special.items()})

    def encode_text(self, text: str) -> list[int]:
        return self.tokenizer.encode(text, add_special_tokens=False).ids

    def count(self, messages: Sequence[Message], add_generation_prompt: bool = True) -> int:
        return len(self.encode_text(self.render(messages, add_generation_prompt)))

    def line_token_counts(self, lines: Sequence[str]) -> list[int]:
        """Tokens per document line plus its newline: an estimate for sizing documents
        (exact where the tokenizer keeps a newline as its own token; the planner confirms
        with one exact count either way)."""
        nl = len(self.encode_text("\n"))
        return [len(e.ids) + nl for e in
                self.tokenizer.encode_batch(list(lines), add_special_tokens=False)]

    def count_many(self, conversations: Sequence[Sequence[Message]]) -> list[int]:
        texts = [self.render(m) for m in conversations]
        return [len(e.ids) for e in self.tokenizer.encode_batch(texts, add_special_tokens=False)]


def _raise(message: str) -> None:
    raise TemplateError(message)
