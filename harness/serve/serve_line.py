"""``sweep --serve 'vllm serve MODEL ...'``: your server line, swept as you wrote it.

The line is read with **vLLM's own argument parser** where vLLM is installed (the parser
``vllm serve`` builds: ``vllm.entrypoints.openai.cli_args.make_arg_parser`` on a
``FlexibleArgumentParser``), with the lab's parser where it is not (then the flags the lab
does not know are kept as written, unread). Three forms:

    vllm serve MODEL [FLAGS]
    python -m vllm.entrypoints.openai.api_server --model MODEL [FLAGS]
    python -m engine.lab [FLAGS]                  (the lab engine: CI's end-to-end form)
    python -m sglang.launch_server --model-path MODEL [FLAGS]   (also ``sglang serve``:
                                                  SGLang's own parser only, where installed)

What the line says becomes the sweep's one configuration (the label, the Bug B rule, the
residues it predicts); every server of the sweep runs the line itself, its flags as
written, with what the harness needs added (``added_flags``): its own host and port, the
cached-token counts, sleep mode for ``--isolation restore``, the TP size of a GPU group.
A field the line leaves out is the engine's own default, and the records' effective
configuration says what the server ran. vLLM's spellings of the sweep's own flags
(``-cc``, ``--enable-prefix-caching``, ``--speculative-config``, ``--base-url``):
``vllm_spellings``.
"""
from __future__ import annotations

import functools
import json
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine.presets import PATCHES, SPEC_TABLE, ServingConfig

from ..names.engine import EngineName
from ..errors import CannotRun, HandledError, UsageError
from ..names.isolation import IsolationName, POLICIES
from .sglang_adapter import SGLANG_MODULE, sglang_fields, sglang_parser, written_args

__all__ = ["ServeLine", "parse_serve_line", "vllm_spellings", "added_flags", "added_lines",
           "FORMS"]

FORMS = ("vllm serve MODEL [FLAGS]",
         "python -m vllm.entrypoints.openai.api_server --model MODEL [FLAGS]",
         "python -m engine.lab [FLAGS]",
         "python -m sglang.launch_server --model-path MODEL [FLAGS] (or sglang serve ...)")
VLLM_MODULE = "vllm.entrypoints.openai.api_server"
LAB_MODULE = "engine.lab"
_VLLM_SERVE = ["vllm", "serve"]   # the program and its verb (not the engine's name)
_SGLANG_SERVE = ["sglang", "serve"]
MODULES = {"vllm": VLLM_MODULE, "lab": LAB_MODULE, "sglang": SGLANG_MODULE}
# the flag that names the model on each engine's line (taken out, put back first)
MODEL_FLAGS = {"vllm": ("--model",), "sglang": ("--model-path", "--model")}
# the harness's own: every server listens where the harness says
REPLACED = ("--port", "--host")
SPEC_OF_METHOD = {method: spec for spec, (method, _, _) in SPEC_TABLE.items()}
# what each engine does with a field the line leaves out (vLLM 0.27.1's and the lab's
# defaults; the effective configuration of every record is what the server reports)
DEFAULTS = {"vllm": {"block_size": 16, "prefix_caching": True, "max_model_len": 245_760,
                     "cudagraph_mode": "FULL_AND_PIECEWISE"},
            "lab": {},
            # sglang 0.5.12's ServerArgs: page_size 1, the radix cache on, both graphs on
            "sglang": {"block_size": 1, "prefix_match_unit": 1, "prefix_caching": True,
                       "cudagraph_mode": "FULL_AND_PIECEWISE", "patches": "none"}}


@dataclass(frozen=True)
class ServeLine:
    """A parsed ``--serve`` line."""

    line: str
    engine: str                     # "vllm" | "lab"
    model: str | None
    flags: tuple[str, ...]          # the line's flags as written (the model, host, port out)
    values: dict                    # ServingConfig fields the line sets
    tensor_parallel_size: int
    served_model_name: str | None
    parser: str                     # which parser read it, in words
    dropped: tuple[str, ...]        # what the harness replaces ("--port 8001")

    def config(self, patches: str) -> ServingConfig:
        """The sweep's configuration: the line's values, the engine's defaults elsewhere."""
        v = {**DEFAULTS[self.engine], **self.values}
        method = v.get("method")
        return ServingConfig(
            engine=self.engine, model=self.model, spec=SPEC_OF_METHOD[method], method=method,
            draft_tokens=v.get("draft_tokens", 0) if method else 0,
            cudagraph_mode=v.get("cudagraph_mode", "FULL_AND_PIECEWISE"),
            prefix_caching=v.get("prefix_caching", False),
            block_size=v.get("block_size", 16),
            prefix_match_unit=v.get("prefix_match_unit"),
            max_model_len=v.get("max_model_len", 32768),
            kv_cache_memory_bytes=v.get("kv_cache_memory_bytes"),
            max_num_batched_tokens=v.get("max_num_batched_tokens"),
            patches=v.get("patches", patches), geometry=v.get("geometry"),
            notes=(f"--serve: the server line as written, read by {self.parser}",))

    def server_argv(self, port: int, host: str = "127.0.0.1") -> list[str]:
        """The line as this harness starts it: its python, the engine's module, the model,
        the line's flags, then this server's host and port."""
        module = MODULES[self.engine]
        flag = MODEL_FLAGS.get(self.engine, ())
        model = [flag[0], self.model] if self.model and flag else []
        return [sys.executable, "-m", module, *model, *self.flags, "--host", host,
                "--port", str(port)]

    def has(self, flag: str) -> bool:
        return any(a == flag or a.startswith(flag + "=") for a in self.flags)

    def argv(self, adapter: Any, port: int, slot: Any) -> list[str]:
        """The line as ``adapter`` starts it on ``port`` and ``slot``: the line, then what
        the harness adds (``added_flags``)."""
        return self.server_argv(port) + added_flags(adapter, slot)


def _split(line: str) -> tuple[str, list[str]]:
    """(engine, the tokens after the program) of one of ``FORMS``."""
    try:
        tokens = shlex.split(line)
    except ValueError as e:
        raise UsageError(f"--serve: cannot split the line: {e}") from None
    if tokens[:2] == _VLLM_SERVE:
        return "vllm", tokens[2:]
    if tokens[:2] == _SGLANG_SERVE:
        return "sglang", tokens[2:]
    if len(tokens) >= 3 and Path(tokens[0]).name.startswith("python") and tokens[1] == "-m":
        if tokens[2] == VLLM_MODULE:
            return "vllm", tokens[3:]
        for engine, module in MODULES.items():
            if tokens[2] == module:
                return engine, tokens[3:]
    raise UsageError(f"--serve: {line!r} is not a server line this harness starts; "
                     f"allowed: {'; '.join(FORMS)}")


def _without(tokens: list[str], names: tuple[str, ...]) -> tuple[list[str], list[str]]:
    """``tokens`` less each ``--name VALUE`` / ``--name=VALUE`` of ``names``; and those."""
    kept, dropped, i = [], [], 0
    while i < len(tokens):
        a = tokens[i]
        name = a.split("=", 1)[0]
        if name in names:
            take = 1 if "=" in a else 2
            dropped.append(" ".join(tokens[i:i + take]))
            i += take
            continue
        kept.append(a)
        i += 1
    return kept, dropped


class _Refuse(HandledError):
    """A quiet parser's error (its message): ``parse_serve_line`` says it as a UsageError."""


def _quiet(cls):
    """``cls`` (an argparse parser class) whose errors are raised, not printed + exit."""
    class Quiet(cls):
        def error(self, message):  # noqa: D401
            raise _Refuse(message)
    return Quiet


def _build_vllm_parser():
    from vllm.entrypoints.openai.cli_args import make_arg_parser
    from vllm.utils.argparse_utils import FlexibleArgumentParser
    return make_arg_parser(_quiet(FlexibleArgumentParser)(prog="vllm serve"))


@functools.lru_cache(maxsize=1)
def _vllm_parser():
    """vLLM's own ``vllm serve`` parser, or (None, why) where it cannot be built here. On a
    machine whose platform vLLM cannot tell (no GPU: "Failed to infer device type"), the
    parser is built on vLLM's CPU platform: only the flags the line writes are read, and
    how they parse does not depend on the platform."""
    try:
        import vllm
        words = f"vLLM {vllm.__version__}'s own parser (make_arg_parser)"
        try:
            return _build_vllm_parser(), words
        except RuntimeError as e:
            if "infer device type" not in str(e):
                raise
            import vllm.platforms as platforms
            from vllm.platforms.cpu import CpuPlatform
            saved, platforms._current_platform = platforms._current_platform, CpuPlatform()
            try:
                return _build_vllm_parser(), words + " on its CPU platform (no GPU here)"
            finally:
                platforms._current_platform = saved
    except Exception as e:   # not installed, or not built for this machine
        return None, f"{type(e).__name__}: {' '.join(str(e).split())[:160]}"


def _lab_parser():
    from engine.lab.cli import build_parser
    return build_parser(_quiet(__import__("argparse").ArgumentParser))


def _field(ns: Any, name: str) -> Any:
    return getattr(ns, name, None)


def _mode(cc: Any) -> str | None:
    """The cudagraph mode of a parsed ``-cc`` (a dict, or vLLM's CompilationConfig)."""
    if cc is None:
        return None
    mode = cc.get("cudagraph_mode") if isinstance(cc, dict) else getattr(cc, "cudagraph_mode", None)
    mode = getattr(mode, "name", mode)
    return str(mode).upper() if mode is not None else None


def _values(ns: Any, written: list[str]) -> dict[str, Any]:
    """The ServingConfig fields the parsed line sets (only flags it wrote)."""
    def wrote(*names):
        return any(a.split("=", 1)[0] in names for a in written)
    out: dict[str, Any] = {}
    spec = _field(ns, "speculative_config")
    if isinstance(spec, str):
        spec = json.loads(spec)
    if spec:
        method = spec.get("method") if isinstance(spec, dict) else getattr(spec, "method", None)
        if method not in SPEC_OF_METHOD:
            known = ", ".join(m for m in SPEC_OF_METHOD if m)
            raise UsageError(f"--serve: speculative method {method!r}: the harness knows "
                             f"{known} (and none)")
        k = spec.get("num_speculative_tokens") if isinstance(spec, dict) else getattr(
            spec, "num_speculative_tokens", None)
        out.update(method=method, draft_tokens=int(k or 0))
    if (mode := _mode(_field(ns, "compilation_config"))) and wrote("-cc", "--compilation-config"):
        out["cudagraph_mode"] = mode
    if wrote("--enable-prefix-caching", "--no-enable-prefix-caching"):
        out["prefix_caching"] = bool(_field(ns, "enable_prefix_caching"))
    for name, dest in (("--block-size", "block_size"), ("--prefix-match-unit", "prefix_match_unit"),
                       ("--max-model-len", "max_model_len"),
                       ("--kv-cache-memory-bytes", "kv_cache_memory_bytes"),
                       ("--max-num-batched-tokens", "max_num_batched_tokens"),
                       ("--geometry", "geometry"), ("--patches", "patches")):
        if wrote(name) and _field(ns, dest) is not None:
            out[dest] = _field(ns, dest)
    if isinstance(out.get("patches"), tuple):   # the lab's parsed fix names
        out["patches"] = _patch_set(out["patches"])
    return out


def _patch_set(names: tuple) -> str:
    if set(names) == set(PATCHES):
        return "all"
    return ",".join(names) or "none"


def _parse(engine: str, tokens: list[str]):
    """(namespace, parser words, unread tokens) of the line's flags."""
    if engine == EngineName.VLLM:
        parser, words = _vllm_parser()
        if parser is not None:
            return parser.parse_args(tokens), words, []
        lab_ns, unread = _lab_parser().parse_known_args(tokens)
        return lab_ns, (f"the lab's parser (vLLM's cannot be built here: {words}; the "
                        "flags the lab does not know are passed as written, unread)"), unread
    return _lab_parser().parse_args(tokens), "the lab's parser", []


@functools.lru_cache(maxsize=8)
def parse_serve_line(line: str) -> ServeLine:
    """The line read (``UsageError``: one line naming what the parser refused)."""
    engine, tokens = _split(line)
    model = None
    if engine == EngineName.VLLM and tokens and not tokens[0].startswith("-"):
        model, tokens = tokens[0], tokens[1:]      # vllm serve MODEL
    flags, dropped = _without(tokens, REPLACED)
    if engine == EngineName.SGLANG:
        return _sglang_line(line, flags, tuple(dropped))
    try:
        ns, words, _unread = _parse(engine, list(flags))
    except _Refuse as e:
        by = "" if engine == EngineName.LAB or _vllm_parser()[0] is not None else \
            " (read by the lab's parser: vLLM's cannot be built here)"
        raise UsageError(f"--serve: {e}{by}") from None
    if engine == EngineName.VLLM:
        model = model or _field(ns, "model_tag") or _field(ns, "model")
        flags, _ = _without(flags, ("--model",))
        if not model:
            raise UsageError("--serve: the line names no model (vllm serve MODEL ...)")
    else:
        model = _field(ns, "model") if any(a.split("=")[0] == "--model" for a in flags) else None
    names = _field(ns, "served_model_name")
    return ServeLine(line=line, engine=engine, model=model, flags=tuple(flags),
                     values=_values(ns, flags),
                     tensor_parallel_size=int(_field(ns, "tensor_parallel_size") or 1),
                     served_model_name=(names[0] if isinstance(names, list) else names) or None,
                     parser=words, dropped=tuple(dropped))


def _sglang_line(line: str, flags: list[str], dropped: tuple[str, ...],
                 parser_of=sglang_parser) -> ServeLine:
    """An SGLang line, read by SGLang's own parser only (``parser_of``: how it is built;
    ``CannotRun`` where it cannot be, naming why)."""
    parser, words = parser_of(_quiet(__import__("argparse").ArgumentParser))
    if parser is None:
        raise CannotRun(f"--serve: SGLang's own argument parser cannot be built here "
                        f"({words}): run the sweep where SGLang is installed")
    try:
        ns = parser.parse_args(list(flags))
    except _Refuse as e:
        raise UsageError(f"--serve: {e}") from None
    values = sglang_fields(written_args(parser, ns, list(flags)))
    if values.get("method", None) not in SPEC_OF_METHOD:
        raise UsageError(f"--serve: --speculative-algorithm {ns.speculative_algorithm}: the "
                         "harness knows NGRAM, NEXTN / EAGLE (mtp) and DFLASH (and none)")
    kept, _ = _without(list(flags), MODEL_FLAGS["sglang"])
    return ServeLine(line=line, engine="sglang", model=_field(ns, "model_path"),
                     flags=tuple(kept), values=values,
                     tensor_parallel_size=int(_field(ns, "tensor_parallel_size") or 1),
                     served_model_name=_field(ns, "served_model_name") or None,
                     parser=words, dropped=dropped)


# -- vLLM's spellings of the sweep's own flags ------------------------------------------
def _json(flag: str, value: str) -> dict:
    try:
        d = json.loads(value)
    except ValueError as e:
        raise UsageError(f"{flag}: not JSON ({e.msg})") from None
    if not isinstance(d, dict):
        raise UsageError(f"{flag}: a JSON object, e.g. "
                         + ('\'{"cudagraph_mode": "FULL"}\'' if flag != "--speculative-config"
                            else '\'{"method": "ngram", "num_speculative_tokens": 3}\''))
    return d


def _spec_args(flag: str, value: str) -> list[str]:
    d = _json(flag, value)
    method = d.get("method")
    if method not in SPEC_OF_METHOD or method is None:
        raise UsageError(f"{flag}: method {method!r}; allowed: "
                         + ", ".join(m for m in SPEC_OF_METHOD if m))
    out = ["--spec", SPEC_OF_METHOD[method]]
    if d.get("num_speculative_tokens") is not None:
        out += ["--draft-tokens", str(d["num_speculative_tokens"])]
    return out


def _cc_args(flag: str, value: str) -> list[str]:
    mode = _json(flag, value).get("cudagraph_mode")
    if mode is None:
        raise UsageError(f"{flag}: the sweep reads only its cudagraph_mode; none given")
    return ["--cudagraph", str(mode).upper()]


_VALUED = {"-cc": _cc_args, "--compilation-config": _cc_args,
           "--speculative-config": _spec_args, "--base-url": lambda f, v: ["--url", v]}
_SWITCHES = {"--enable-prefix-caching": "--prefix-cache",
             "--no-enable-prefix-caching": "--no-prefix-cache"}


def vllm_spellings(argv: list[str]) -> list[str]:
    """``argv`` with vLLM's spellings of sweep flags in the sweep's own: ``-cc`` /
    ``--compilation-config JSON`` -> ``--cudagraph MODE``, ``--speculative-config JSON`` ->
    ``--spec S --draft-tokens K``, ``--enable-prefix-caching`` -> ``--prefix-cache``,
    ``--base-url`` -> ``--url`` (a value after ``--serve`` or ``--engine-arg`` is left alone)."""
    out: list[str] = []
    i = 0
    while i < len(argv):
        a = str(argv[i])
        name, eq, value = a.partition("=")
        if name in _VALUED:
            if not eq:
                if i + 1 >= len(argv):
                    raise UsageError(f"{name}: expected one argument")
                value, i = str(argv[i + 1]), i + 1
            out += _VALUED[name](name, value)
        elif a in _SWITCHES:
            out.append(_SWITCHES[a])
        else:
            out.append(a)
            if a in ("--serve", "--engine-arg", "--server-cmd") and i + 1 < len(argv):
                out.append(str(argv[i + 1]))
                i += 1
        i += 1
    return out


def added_flags(adapter: Any, slot: Any) -> list[str]:
    """What the harness adds to a --serve line (its host and port aside): cached token
    counts, sleep mode on a restore point, a GPU group's TP size, the fill's worker
    extension (--poison), the --engine-args."""
    if hasattr(adapter, "serve_flags"):   # an engine that spells its own (SGLang)
        return adapter.serve_flags(slot)
    s, out = adapter.serve, []
    if not s.has("--enable-prompt-tokens-details"):
        out.append("--enable-prompt-tokens-details")
    if adapter.sleep_mode and not s.has("--enable-sleep-mode"):
        out.append("--enable-sleep-mode")
    if slot.tensor_parallel_size > 1 and s.tensor_parallel_size == 1:
        out += ["--tensor-parallel-size", str(slot.tensor_parallel_size)]
    out += list(getattr(adapter, "poison_argv", tuple)())   # --poison: vLLM's worker extension
    return out + list(getattr(adapter, "extra_args", ()))


def added_lines(opts: Any, adapter: Any) -> list[str]:
    """What ``sweep --serve`` says before it starts: which parser read the line, the
    configuration, and every flag and variable the harness adds to the line."""
    line = opts.serving.serve_line
    slot = opts.running.slots[0]
    out = [f"serve: {line.engine} line read by {line.parser}: {opts.serving.configs[0].label()}"]
    passes = POLICIES[opts.running.isolation].passes   # auto: a restore (else reset) pass, then fresh
    isolations = [p for p in passes if p != IsolationName.RESET or not adapter.can_restore()] or \
        [opts.running.isolation]
    for iso in dict.fromkeys(isolations):
        a = adapter.for_isolation(iso)
        argv, env = a.command(opts.serving.configs[0], 54321, slot)
        flags = added_flags(a, slot)
        words = ["--host 127.0.0.1 --port {port} (a port per server"
                 + (f"; the line's {', '.join(line.dropped)} is not used)" if line.dropped
                    else ")")]
        words += [" ".join(flags)] if flags else []
        words += [f"{k}={v}" for k, v in sorted(env.items())
                  if k not in ("PYTHONPATH",) and not k.endswith("_THREADS")]
        out.append(f"serve: added for {iso} points: " + ", ".join(w for w in words if w))
    return out
