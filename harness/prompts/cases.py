"""A user's prompt set (``--prompts FILE``): one case per JSONL line, validated.

A case is ``{"messages": [...], "expected": "...", "pad": ..., "id": "..."}``:

- ``messages`` (required): OpenAI chat messages, any roles, any number of turns; a
  message's ``content`` is a string, a list of content parts, or null (an assistant turn
  that only carries ``tool_calls``). They are sent as given, plus the padding.
- ``expected`` (optional): the exact answer; it judges every phase of the case (the
  passage reference), whatever ``--reference`` says for cases without one.
- ``pad`` (optional): which message the padding goes into: an index (``2``, ``-1``), a
  role (``"user"``: the last user message) or ``"ROLE:N"`` (the N-th message of that role,
  0-based, negative from the end). Default: the last user message.
- ``id`` (optional): letters, digits, ``.``, ``_``, ``-`` (it names log files and reruns);
  default ``line-N``.

A malformed file is one ``FILE:LINE: problem`` usage error (exit 2), found before
anything starts.
"""
from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from typing import Any

from ..errors import UsageError

__all__ = ["PromptCase", "CaseFileError", "load_cases", "select_cases", "CASE_KEYS"]

CASE_KEYS = ("id", "messages", "expected", "pad")
_ID = re.compile(r"[^\W_][\w.\-]{0,63}")   # Unicode letters and digits, as the docs say
_ROLE_SEL = re.compile(r"([A-Za-z_][\w\-]*)(?::(-?\d+))?")

Message = dict[str, Any]


class CaseFileError(UsageError):
    """A prompt file that cannot be used: ``FILE:LINE: problem``."""


@dataclass(frozen=True)
class PromptCase:
    """One validated case. ``messages_json`` keeps the messages as canonical JSON so a
    case is hashable and picklable (``SweepOptions`` carries it to Ray nodes)."""

    id: str
    line: int
    messages_json: str
    pad_index: int                   # the message the padding goes into
    expected: str | None = None

    @property
    def messages(self) -> list[Message]:
        return json.loads(self.messages_json)

    @property
    def digest(self) -> str:
        """12 hex of a sha1 over what the case says (messages, pad, expected): a resumed
        run checks its cases against the ones it started with."""
        blob = json.dumps([self.messages_json, self.pad_index, self.expected])
        return hashlib.sha1(blob.encode("utf-8")).hexdigest()[:12]

    @property
    def pad_role(self) -> str:
        return self.messages[self.pad_index]["role"]

    def describe_pad(self) -> str:
        return f"messages[{self.pad_index}] ({self.pad_role})"

    def padded(self, unit: str, count: int) -> list[Message]:
        """The messages with ``count`` padding units appended to the padded message's
        text (its last text part when the content is a list of parts)."""
        msgs = self.messages
        if count:
            m = msgs[self.pad_index]
            content = m.get("content")
            if isinstance(content, str):
                m["content"] = content + unit * count
            else:
                part = [p for p in content if _text_part(p)][-1]
                part["text"] = part["text"] + unit * count
        return msgs


def _text_part(p: Any) -> bool:
    return isinstance(p, dict) and p.get("type") == "text" and isinstance(p.get("text"), str)


def _check_message(i: int, m: Any) -> str | None:
    """The problem with one message, or None."""
    if not isinstance(m, dict):
        return f"messages[{i}] must be an object, got {type(m).__name__}"
    role = m.get("role")
    if not isinstance(role, str) or not role:
        return f"messages[{i}] needs a string \"role\""
    if "content" not in m:
        return None if m.get("tool_calls") else f"messages[{i}] ({role}) has no \"content\""
    content = m["content"]
    if content is None:
        return None if m.get("tool_calls") else (
            f"messages[{i}] ({role}): \"content\" is null without \"tool_calls\"")
    if isinstance(content, str):
        return None
    if isinstance(content, list) and all(isinstance(p, dict) and isinstance(p.get("type"), str)
                                         for p in content):
        return None
    return (f"messages[{i}] ({role}): \"content\" must be a string, a list of content parts "
            "({\"type\": ...}) or null")


def _resolve_pad(pad: Any, messages: list[Message]) -> tuple[int | None, str]:
    """(message index, "") or (None, the problem) for a ``pad`` selector."""
    n = len(messages)
    if pad is None:
        pad = "user"
    if isinstance(pad, bool) or not isinstance(pad, (int, str)):
        return None, f"\"pad\" must be an index or a role selector, got {json.dumps(pad)}"
    if isinstance(pad, str) and re.fullmatch(r"-?\d+", pad.strip()):
        pad = int(pad)
    if isinstance(pad, int):
        if not -n <= pad < n:
            return None, f"\"pad\": index {pad} is outside the {n} messages"
        return pad % n, ""
    m = _ROLE_SEL.fullmatch(pad.strip())
    if not m:
        return None, (f"\"pad\": {pad!r} is not valid; allowed: an index, a role (\"user\") "
                      "or \"ROLE:N\"")
    role, nth = m.group(1), int(m.group(2)) if m.group(2) is not None else -1
    of_role = [i for i, msg in enumerate(messages) if msg.get("role") == role]
    if not of_role:
        return None, f"\"pad\": no {role} message to pad" + (
            "; say which with \"pad\"" if pad == "user" else "")
    if not -len(of_role) <= nth < len(of_role):
        return None, f"\"pad\": {pad!r}: there are {len(of_role)} {role} messages"
    return of_role[nth], ""


def _pad_target_problem(i: int, m: Message) -> str | None:
    content = m.get("content")
    if isinstance(content, str) or (isinstance(content, list) and any(map(_text_part, content))):
        return None
    return f"\"pad\" selects messages[{i}] ({m.get('role')}), which has no text to pad"


def _case(obj: Any, line: int) -> tuple[PromptCase | None, str]:
    if not isinstance(obj, dict):
        return None, f"a case is a JSON object, got {type(obj).__name__}"
    unknown = [k for k in obj if k not in CASE_KEYS]
    if unknown:
        return None, f"unknown key {unknown[0]!r} (allowed: {', '.join(CASE_KEYS)})"
    messages = obj.get("messages")
    if not isinstance(messages, list) or not messages:
        return None, "\"messages\" must be a non-empty list of chat messages"
    for i, m in enumerate(messages):
        problem = _check_message(i, m)
        if problem:
            return None, problem
    expected = obj.get("expected")
    if expected is not None and (not isinstance(expected, str) or not expected):
        return None, "\"expected\" must be a non-empty string (the exact answer)"
    cid = obj.get("id", f"line-{line}")
    if not isinstance(cid, str) or not _ID.fullmatch(cid):
        return None, (f"\"id\" {json.dumps(cid)} is not valid; allowed: up to 64 letters, "
                      "digits, '.', '_' or '-', starting with a letter or digit")
    index, problem = _resolve_pad(obj.get("pad"), messages)
    if index is None:
        return None, problem
    problem = _pad_target_problem(index, messages[index])
    if problem:
        return None, problem
    blob = json.dumps(messages, ensure_ascii=False, sort_keys=True)
    return PromptCase(cid, line, blob, index, expected), ""


def load_cases(path: str) -> tuple[PromptCase, ...]:
    """Every case of a JSONL prompt file, or a ``CaseFileError`` naming the line."""
    try:
        with open(path, "rb") as fh:
            raw = fh.read()
    except OSError as e:
        raise CaseFileError(f"--prompts {path}: cannot read: {e.strerror or e}") from None
    if raw.startswith(b"\xef\xbb\xbf"):   # a UTF-8 BOM (Windows editors write one): not text
        raw = raw[3:]
    cases: list[PromptCase] = []
    first_line: dict[str, int] = {}
    for n, bline in enumerate(raw.split(b"\n"), 1):
        try:
            text = bline.decode("utf-8").strip()
        except UnicodeDecodeError:
            raise CaseFileError(f"{path}:{n}: not UTF-8 text") from None
        if not text:
            continue
        try:
            obj = json.loads(text)
        except json.JSONDecodeError as e:
            raise CaseFileError(f"{path}:{n}: not JSON: {e.msg} (column {e.colno})") from None
        case, problem = _case(obj, n)
        if case is None:
            raise CaseFileError(f"{path}:{n}: {problem}")
        if case.id in first_line:
            raise CaseFileError(f"{path}:{n}: duplicate id {case.id!r} (first on line "
                                f"{first_line[case.id]})")
        first_line[case.id] = n
        cases.append(case)
    if not cases:
        raise CaseFileError(f"{path}: no cases (one JSON object per line)")
    return tuple(cases)


def select_cases(cases: tuple[PromptCase, ...], ids: list[str],
                 path: str) -> tuple[PromptCase, ...]:
    """The cases named by ``--case`` (all when none is named), in file order."""
    if not ids:
        return cases
    known = {c.id for c in cases}
    twice = next((cid for i, cid in enumerate(ids) if cid in ids[:i]), None)
    if twice is not None:   # --case a,a ran case a twice under one id (issue 50)
        raise UsageError(f"--case: {twice!r} is named twice; name each case once")
    for cid in ids:
        if cid not in known:
            shown = ", ".join(c.id for c in cases[:8]) + (", ..." if len(cases) > 8 else "")
            raise UsageError(f"--case: {cid!r} is not a case of {path} (ids: {shown})")
    return tuple(c for c in cases if c.id in set(ids))
