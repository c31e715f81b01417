"""Tokenizer, chat template and incremental detokenization.

Mirrors ``vllm/transformers_utils/tokenizer.py`` (load from the model dir),
``vllm/entrypoints/chat_utils.py`` (``apply_chat_template`` with the template from
``tokenizer_config.json``) and ``vllm/v1/engine/detokenizer.py`` (incremental decoding
with prefix/read offsets, so a UTF-8 character split across tokens is never emitted half).
jinja2 is imported on the first chat request, not at boot.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np


class ChatFormatError(ValueError):
    pass


class LabTokenizer:
    def __init__(self, model_dir: str | Path) -> None:
        from tokenizers import Tokenizer

        d = Path(model_dir)
        self.tok = Tokenizer.from_file(str(d / "tokenizer.json"))
        cfg_path = d / "tokenizer_config.json"
        self.config: dict[str, Any] = json.loads(cfg_path.read_text()) if cfg_path.is_file() else {}
        self.chat_template_src: str | None = self.config.get("chat_template")
        self._template = None
        eos = self.config.get("eos_token") or "<|im_end|>"
        self.eos_token_id = self.tok.token_to_id(eos)
        specials = {t for t in (eos, "<|endoftext|>") if self.tok.token_to_id(t) is not None}
        self.stop_token_ids = tuple(sorted(self.tok.token_to_id(t) for t in specials))
        self.nl_id = self.tok.encode("\n", add_special_tokens=False).ids[0]
        self.vocab_size = self.tok.get_vocab_size()
        # the added special tokens (<|im_end|>, ...): what skip_special_tokens leaves out
        self.special_ids = frozenset(i for i, t in self.tok.get_added_tokens_decoder().items()
                                     if t.special)

    # -- encode/decode --------------------------------------------------------------------
    def encode(self, text: str) -> np.ndarray:
        return np.asarray(self.tok.encode(text, add_special_tokens=False).ids, dtype=np.int32)

    def decode(self, ids, skip_special_tokens: bool = True) -> str:
        return self.tok.decode([int(i) for i in ids], skip_special_tokens=skip_special_tokens)

    def decode_batch(self, batch, skip_special_tokens: bool = True) -> list[str]:
        return self.tok.decode_batch(batch, skip_special_tokens=skip_special_tokens)

    def id_to_token(self, i: int) -> str | None:
        return self.tok.id_to_token(int(i))

    # -- chat template --------------------------------------------------------------------
    def apply_chat_template(self, messages: list[dict[str, Any]],
                            add_generation_prompt: bool = True) -> str:
        if not self.chat_template_src:
            raise ChatFormatError("the model has no chat template")
        if self._template is None:
            import jinja2.sandbox

            env = jinja2.sandbox.ImmutableSandboxedEnvironment(trim_blocks=True,
                                                                lstrip_blocks=True)
            self._template = env.from_string(self.chat_template_src)
        return self._template.render(messages=normalise_messages(messages),
                                     add_generation_prompt=add_generation_prompt)


def normalise_messages(messages: Any) -> list[dict[str, str]]:
    """OpenAI chat messages -> [{'role', 'content': str}] (text parts joined)."""
    if not isinstance(messages, list) or not messages:
        raise ChatFormatError("'messages' must be a non-empty list")
    out = []
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or not isinstance(m.get("role"), str):
            raise ChatFormatError(f"messages[{i}] must be an object with a string 'role'")
        content = m.get("content")
        if content is None:
            text = ""
        elif isinstance(content, str):
            text = content
        elif isinstance(content, list):
            parts = []
            for p in content:
                if isinstance(p, dict) and p.get("type") == "text" and isinstance(p.get("text"), str):
                    parts.append(p["text"])
                elif isinstance(p, str):
                    parts.append(p)
                else:
                    raise ChatFormatError(f"messages[{i}].content: only text parts are supported")
            text = "\n".join(parts)
        else:
            raise ChatFormatError(f"messages[{i}].content must be a string or a list of parts")
        out.append({"role": m["role"], "content": text})
    return out


class IncrementalDetokenizer:
    """vLLM-style prefix/read offsets over the output ids (``detokenize_incrementally`` in
    ``vllm/transformers_utils/detokenizer_utils.py``). With ``skip_special_tokens`` (vLLM's
    default) a special token is dropped before it joins the window, as vLLM's
    ``convert_ids_to_tokens(..., skip_special_tokens=True)`` drops it: an ``ignore_eos``
    stream that emits only ``<|im_end|>`` then decodes nothing new per step, where keeping
    the ids made every step decode a window that grew without end (the server spent its
    time there and a hung-up stream was not aborted: tests/harness/test_live_traffic.py)."""

    def __init__(self, tokenizer: LabTokenizer, skip_special_tokens: bool = True) -> None:
        self.t = tokenizer
        self.skip = tokenizer.special_ids if skip_special_tokens else frozenset()
        self.ids: list[int] = []
        self.prefix_offset = 0
        self.read_offset = 0

    def push(self, new_ids: list[int]) -> str:
        new_ids = [i for i in new_ids if i not in self.skip]
        if not new_ids:
            return ""
        self.ids.extend(new_ids)
        skip = bool(self.skip)
        prefix = self.t.decode(self.ids[self.prefix_offset:self.read_offset], skip)
        full = self.t.decode(self.ids[self.prefix_offset:], skip)
        if len(full) > len(prefix) and not full.endswith("\ufffd"):
            delta = full[len(prefix):]
            self.prefix_offset = self.read_offset
            self.read_offset = len(self.ids)
            return delta
        return ""
