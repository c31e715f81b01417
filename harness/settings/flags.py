"""Every ``sweep`` flag, declared once: how it parses, what it validates, which matrix
axis a comma list of it expands, and how a rerun command spells it.

``sweep_parser`` builds the argparse parser from ``FLAGS``; ``matrix_axes`` gives
``configs.expand_matrix`` the comma lists in declaration order (the product's order);
``rerun_command`` writes the one command line that reruns a data point from each flag's
``rerun``. The flags that only make sense together are checked in ``flag_checks.py``; the
manifest's copy of the flags, and which ones an argv wrote, are ``flag_manifest.py``.
Adding a flag is one ``Flag(...)`` here (and its field on ``SweepOptions`` when
it is not a matrix axis): see docs/architecture.md.
"""
from __future__ import annotations

import argparse
import shlex
import textwrap
from dataclasses import dataclass, field
from typing import Any, Callable, NamedTuple, Sequence

from engine.presets import CTXS, CUDAGRAPH_MODES, GEOMETRIES, PATCHES, RUNNERS, SPECS, ServingConfig

from .backend_registry import backend_names
from ..serve.engine_help import (can_fork, ctx_words, engine_help, for_engines, notes, per_engine,
                                 runner_help, spec_words)
from ..serve.engines import ADAPTERS
from ..errors import UsageError
from ..names.isolation import isolation_help
from .flag_values import (a_path, seconds_at_least, choices_of, int_in, ints, or_none, patch_sets,
                          positive_float, positive_int, seed_list)
from ..serve.slots import one_slot_args
from ..names.isolation import ISOLATIONS
from .flag_values import LOAD_MODES
from .sweep_options import SweepOptions
from ..names.history import HISTORIES, HISTORY_NAMES

__all__ = ["Flag", "FLAGS", "GROUPS", "UNSET", "sweep_parser", "matrix_axes",
           "rerun_command", "Rerun", "positive_int", "positive_float", "Parser",
           "dest_of", "add_flags", "flag_dest"]

UNSET = object()   # a matrix axis left to the preset (nothing passed to resolve)


class _Wrap(argparse.RawDescriptionHelpFormatter):
    """Help texts wrap between words only: a flag they name is never cut at a hyphen."""

    def _split_lines(self, text: str, width: int) -> list[str]:
        return textwrap.wrap(" ".join(text.split()), width, break_on_hyphens=False)


class Parser(argparse.ArgumentParser):
    """argparse that reports a usage error in one line (flag + allowed values), exit 2.
    No prefix matching: ``--residue 3`` is not ``--residues 3`` (it ran a real sweep)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **{"allow_abbrev": False, **kwargs})

    def error(self, message: str) -> None:  # type: ignore[override]
        import difflib
        bad = message.split(":", 1)[1].split() if message.startswith("unrecognized") else []
        near = difflib.get_close_matches(bad[0].split("=")[0], list(self._option_string_actions),
                                         n=1, cutoff=0.75) if bad else []
        raise UsageError(message + (f" (did you mean {near[0]}?)" if near else ""))


class Rerun(NamedTuple):
    """What a flag's rerun spelling is computed from: the sweep, one configuration and
    one residue of it (and, with --prompts, the case)."""
    opts: SweepOptions
    cfg: ServingConfig
    residue: int
    modulus: int
    seed: int | None = None   # the point's document seed (``--seed`` lists)
    case: str | None = None


@dataclass(frozen=True)
class Flag:
    name: str                                    # "--block-size"
    group: str                                   # one of GROUPS
    help: str | Callable[[], str] | None         # a callable: built from the engine adapters
    kw: dict = field(default_factory=dict)       # argparse keywords (type, default, ...)
    axis: str | None = None                      # engine.presets.resolve keyword it expands
    items: Callable[[str, str | None], list] | None = None   # comma list -> axis values
    rerun: Callable[[Rerun], list[str]] | None = None        # its spelling in a rerun
    resume: bool = False     # --resume may take a new value (where files go, how to run)

    def help_text(self) -> str | None:
        """What --help says (an engine's facts asked of its adapter when it is built)."""
        return self.help() if callable(self.help) else self.help


GROUPS = ("engine and configuration", "what to measure", "how to run", "gating and output")
ENGINE, MEASURE, RUN, OUTPUT = GROUPS


# -- value parsers: harness/settings/flag_values.py ----------------------------------------------
# OpenAI's (and vLLM's default --max-logprobs) limit on top_logprobs
_logprobs_count = int_in(0, 20, "0..20: OpenAI's and vLLM's default limit on top_logprobs")
# more background conversations than this is a load test, not a shape
_load_count = int_in(0, 64, "0..64 background conversations")


def _opt(name: str, attr: str) -> Callable[[Rerun], list[str]]:
    """Rerun spelling of an option that is repeated only when it was given."""
    return lambda r: [name, str(r.opts.value(attr))] if r.opts.value(attr) else []


def _always(name: str, get: Callable[[Rerun], Any]) -> Callable[[Rerun], list[str]]:
    return lambda r: [name, str(get(r))]


DEFAULT_ENGINE = "lab"
DEFAULT_OUT = "results"   # --out unset (options.py; a --baseline run id is looked up there)


# -- the flags, in the order of the matrix product and of a rerun command ---------------
FLAGS: tuple[Flag, ...] = (
    Flag("--engine", ENGINE, lambda: engine_help(DEFAULT_ENGINE), {"default": DEFAULT_ENGINE,
         "choices": tuple(ADAPTERS)}, rerun=_always("--engine", lambda r: r.cfg.engine)),
    Flag("--spec", ENGINE, f"speculative preset (matrix): {spec_words()}", {"default": "mtp"},
         axis="spec", items=choices_of(SPECS), rerun=_always("--spec", lambda r: r.cfg.spec)),
    Flag("--ctx", ENGINE, f"context preset (matrix): {ctx_words()}", {"default": "huge"},
         axis="ctx", items=choices_of(CTXS), rerun=_always("--ctx", lambda r: r.cfg.ctx)),
    Flag("--cudagraph", ENGINE,
         f"cudagraph mode(s): {', '.join(CUDAGRAPH_MODES)} (default from preset)",
         {"metavar": "MODE"}, axis="cudagraph_mode", items=or_none(choices_of(CUDAGRAPH_MODES)),
         rerun=_always("--cudagraph", lambda r: r.cfg.cudagraph_mode)),
    Flag("--geometry", ENGINE, lambda: f"model geometry: hybrid | dense (matrix); "
         f"{notes('--geometry')}", axis="geometry", items=or_none(choices_of(GEOMETRIES)),
         rerun=lambda r: ["--geometry", r.cfg.geometry] if r.cfg.geometry else []),
    Flag("--draft-tokens", ENGINE, "draft tokens k (matrix; default from --spec)",
         {"metavar": "K"}, axis="draft_tokens", items=ints(),
         rerun=lambda r: ["--draft-tokens", str(r.cfg.draft_tokens)] if r.cfg.method else []),
    Flag("--prefix-cache", ENGINE, "prefix caching on (the preset default)",
         {"dest": "prefix_cache", "action": "store_true", "default": None},
         rerun=lambda r: ["--prefix-cache" if r.cfg.prefix_caching else "--no-prefix-cache"]),
    Flag("--no-prefix-cache", ENGINE, "prefix caching off",
         {"dest": "prefix_cache", "action": "store_false"}),
    Flag("--block-size", ENGINE, "KV block size(s) (matrix)", {"metavar": "N"},
         axis="block_size", items=ints(), rerun=_always("--block-size", lambda r: r.cfg.block_size)),
    Flag("--prefix-match-unit", ENGINE, "prefix-cache hash unit(s) (matrix)",
         {"metavar": "N|none"}, axis="prefix_match_unit", items=ints(allow_none=True, unset=UNSET),
         rerun=_always("--prefix-match-unit", lambda r: r.cfg.prefix_match_unit or "none")),
    Flag("--max-model-len", ENGINE, "max model length(s) (matrix)", {"metavar": "N"},
         axis="max_model_len", items=ints(),
         rerun=_always("--max-model-len", lambda r: r.cfg.max_model_len)),
    Flag("--kv-cache-memory-bytes", ENGINE, "KV cache memory (matrix)", {"metavar": "N"},
         axis="kv_cache_memory_bytes", items=ints(),
         rerun=lambda r: (["--kv-cache-memory-bytes", str(r.cfg.kv_cache_memory_bytes)]
                          if r.cfg.kv_cache_memory_bytes else [])),
    Flag("--max-num-batched-tokens", ENGINE, "chunked-prefill token budget(s) per step "
         "(matrix; default: the engine's): a prompt of templated length L ends in a final "
         "chunk of L mod B tokens (docs/shapes.md)", {"metavar": "B"},
         axis="max_num_batched_tokens", items=ints(),
         rerun=lambda r: (["--max-num-batched-tokens", str(r.cfg.max_num_batched_tokens)]
                          if r.cfg.max_num_batched_tokens else [])),
    Flag("--patches", ENGINE, f"fix set(s): all | none | names joined by '+' from "
         f"{', '.join(PATCHES)} (matrix)", {"default": "all"}, axis="patches", items=patch_sets,
         rerun=_always("--patches", lambda r: r.cfg.patches.replace(",", "+"))),
    Flag("--runner", ENGINE, runner_help, {"metavar": "RUNNER"}, axis="runner",
         items=or_none(choices_of(RUNNERS)),
         rerun=lambda r: ["--runner", r.cfg.runner] if r.cfg.runner != "auto" else []),
    Flag("--async-scheduling", ENGINE, lambda: "on | off, or both (matrix): the engine's "
         f"asynchronous scheduling ({for_engines('async_scheduling')}: --async-scheduling / "
         "--no-async-scheduling; default: the engine's own; recorded in the configuration)",
         {"metavar": "on|off"}, axis="async_scheduling", items=or_none(choices_of(("on", "off"))),
         rerun=lambda r: (["--async-scheduling", r.cfg.async_scheduling]
                          if r.cfg.async_scheduling else [])),
    Flag("--model", ENGINE, lambda: f"model directory ({notes('--model')})",
         rerun=_opt("--model", "model")),
    Flag("--served-model-name", ENGINE, "model name for requests (default: /v1/models)",
         rerun=_opt("--served-model-name", "served_model_name")),
    Flag("--server-cmd", ENGINE, "--engine cmd: server command with {port}, {gpu}, {tp}, "
         "{model} placeholders", {"metavar": "TEMPLATE"}, rerun=_opt("--server-cmd", "server_cmd")),
    Flag("--serve", ENGINE, "your server line, swept as written: its flags read by the engine's "
         "own parser, its configuration the sweep's (docs/serve.md)",
         {"metavar": "LINE"}, rerun=_opt("--serve", "serve")),
    Flag("--served-config", ENGINE, "--engine cmd: what the server runs, as JSON (method, "
         "draft_tokens, cudagraph_mode, patches, prefix_caching, block_size, "
         "prefix_match_unit, ...); what the server reports wins", {"metavar": "JSON"},
         rerun=_opt("--served-config", "served_config")),
    Flag("--api-key", ENGINE, "bearer token for the server"),
    Flag("--draft-model", ENGINE, lambda: f"{for_engines('takes_draft_model')}: drafter "
         "checkpoint (dflash2)", {"metavar": "DIR"}, rerun=_opt("--draft-model", "draft_model")),
    Flag("--engine-arg", ENGINE, lambda: f"{for_engines('takes_engine_args')}: extra server "
         f"argument, repeatable (e.g. {notes('--engine-arg')})",
         {"action": "append", "default": [], "metavar": "ARG"},
         rerun=lambda r: [f"--engine-arg={a}" for a in r.opts.serving.engine_args]),
    Flag("--residues", MEASURE, "all (every residue, default) | risky (k, k+1, k+2 and "
         "the ends 0, 1, modulus-1) | tails[:N] (final chunks of 1, k, k+1, k+2 tokens, the "
         "rule's residues and N seeded others) | LIST (3,4,5, each once) | A-B | sample:N "
         "(N residues: k+1 and the rule's residues always, the rest seeded)",
         {"default": "all"}, rerun=_always("--residues", lambda r: r.residue)),
    Flag("--modulus", MEASURE, "N or auto (from the effective geometry: the hit unit, "
         "and the chunk budget when --max-num-batched-tokens cuts a final chunk; records "
         "say which and why)", {"default": "128"},
         rerun=_always("--modulus", lambda r: r.modulus)),
    Flag("--context", MEASURE, "approximate templated length of the measured prompt "
         "(default 4096; not used with --prompts)",
         {"type": positive_int("--context"), "default": 4096},
         rerun=lambda r: [] if r.opts.measure.prompts else ["--context", str(r.opts.measure.context)]),
    Flag("--phases", MEASURE, "comma list of cold (the prompt's first request: nothing "
         "cached), warm (a warm-up conversation that continues the measured prompt, then the "
         "measured prompt: a hit through another request's blocks), self-hit (the same prompt again: the final chunk is the uncached tail) "
         "(default cold,self-hit)",
         {"default": "cold,self-hit"}, rerun=_always("--phases", lambda r: ",".join(r.opts.measure.phases))),
    Flag("--history", MEASURE, "what the server does right before the measured request "
         "(matrix, comma list; default none): " + "; ".join(
             f"{h.name} ({h.before})" for h in HISTORIES[1:]) + ". Each proven per point "
         "or the point is invalid (docs/histories.md)", {"default": "none", "metavar": "NAME"},
         axis="history", items=or_none(choices_of(HISTORY_NAMES)),
         rerun=lambda r: ["--history", r.cfg.history] if r.cfg.history != "none" else []),
    Flag("--prompt-logprobs", MEASURE, "ask the measured requests' prompt logprobs and compare "
         "them with the cold reference's at each position: the first position that differs "
         "is the finding (upstream #53488: MTP corrupting prompt_logprobs while the text "
         "looks fine)", {"action": "store_true"},
         rerun=lambda r: ["--prompt-logprobs"] if r.opts.measure.prompt_logprobs else []),
    Flag("--reference", MEASURE, "what an answer is judged against: passage (the "
         "document's own lines, default) | cold (the point's cold answer judges its hits; "
         "the cold phase is the reference) | first (the first configuration's answer to the "
         "same prompt) | consensus (the answer most residues of the configuration give) | "
         "golden:RUN (a stored run's answers) (docs/reports.md: what each can see)",
         {"default": "passage"},
         rerun=_always("--reference", lambda r: r.opts.measure.reference)),
    Flag("--logprobs", MEASURE, lambda: "top-N logprobs per answer token, 0 = off (default: "
         f"{per_engine(lambda c: c.logprobs_default)}; docs/records.md says why they do not "
         "change the answer)",
         {"type": _logprobs_count, "metavar": "N"},
         rerun=lambda r: ["--logprobs", str(r.opts.measure.logprobs)]
         if r.opts.measure.logprobs != r.opts.measure.logprobs_default else []),
    Flag("--answer-lines", MEASURE, "lines of the document the answer must reproduce "
         "(default 3; not used with --prompts)",
         {"type": positive_int("--answer-lines"), "default": 3},
         rerun=lambda r: [] if r.opts.measure.prompts else ["--answer-lines", str(r.opts.measure.answer_lines)]),
    Flag("--max-tokens", MEASURE, "most tokens a measured answer may generate "
         "(default 256)",
         {"type": positive_int("--max-tokens"), "default": 256},
         rerun=_always("--max-tokens", lambda r: r.opts.measure.max_tokens)),
    # a prompt set multiplies points (case x residue), not servers: run/plan.py loops over
    # its cases and each Point carries one (docs/prompts.md)
    Flag("--prompts", MEASURE, "a JSONL prompt set (docs/prompts.md): sweep every residue of "
         "each case instead of the document prompt", {"metavar": "FILE"},
         rerun=lambda r: ["--prompts", r.opts.measure.prompts] if r.opts.measure.prompts else []),
    Flag("--case", MEASURE, "--prompts: only these case ids (comma list)", {"metavar": "IDS"},
         rerun=lambda r: ["--case", r.case] if r.case else []),
    Flag("--seed", MEASURE, "document / sampling seed, or a comma list (0,1,2): each residue "
         "is measured on each seed's document (default 0)",
         {"type": seed_list, "default": (0,), "metavar": "N[,N...]"},
         rerun=_always("--seed", lambda r: r.opts.measure.seed if r.seed is None else r.seed)),
    Flag("--load", MEASURE, "N seeded background conversations (unrelated documents, long "
         "decodes, the same server) running while each measured request runs, so its final "
         "prefill chunk is batched beside spec-decode steps; records carry what ran beside "
         "it (docs/shapes.md; default 0: a lone request)",
         {"type": _load_count, "default": 0, "metavar": "N"},
         rerun=lambda r: ["--load", str(r.opts.measure.load)] if r.opts.measure.load else []),
    Flag("--load-mode", MEASURE, "--load: steady (background decodes run on) | cancel (each "
         "is cut after a few tokens and sent again: aborts and new prefills beside the "
         "measured request)", {"default": "steady", "choices": LOAD_MODES},
         rerun=lambda r: (["--load-mode", r.opts.measure.load_mode]
                          if r.opts.measure.load and r.opts.measure.load_mode != "steady" else [])),
    Flag("--isolation", RUN, isolation_help(default="fresh"),   # isolation.POLICIES
         {"default": "fresh", "choices": ISOLATIONS}),
    Flag("--auto-sample", RUN, "--isolation auto: ok residues per configuration and document "
         "confirmed on a fresh server, seeded (default 4)",
         {"type": int, "default": 4, "metavar": "N"}),
    Flag("--cache-dir", RUN, lambda: f"{for_engines('compile_caches')}: one folder for the "
         "compile, Inductor and Triton caches of every server, kept between runs; each record "
         "notes hit or miss", {"metavar": "DIR"}),
    Flag("--launcher", RUN, lambda: "how servers start: plain (a new process, default) | "
         f"prefork ({for_engines(can_fork)}: forked from a parent that imported the engine "
         "once; falls back to plain)",
         {"default": "plain", "choices": ("plain", "prefork")}),
    Flag("--poison", RUN, "auto (default: on wherever the engine can) | on (every server, "
         "else refused) | off (no fill): fill the memory a stale read can reach (KV pool state, attention KV, the metadata "
         "builders' bookkeeping) with a fixed pattern after boot and at every restore, the "
         "proof in every record (docs/isolation.md: where it makes a broken answer's bytes "
         "the same on every server, and where not yet)", {"default": "auto", "choices": ("auto", "on", "off")},
         rerun=lambda r: ["--poison", r.opts.serving.poison] if r.opts.serving.poison != "auto" else []),
    Flag("--url", RUN, "sweep this running OpenAI-compatible server (http://HOST:PORT): "
         "start nothing, stop nothing; each point its own document, cold proven by "
         "cached_tokens 0 (docs/live.md); key from RESIDUE_LAB_API_KEY or OPENAI_API_KEY",
         {"metavar": "URL"}),
    Flag("--max-requests", RUN, "--url: most HTTP requests the sweep may send, planning "
         "included; a plan that needs more is refused before any chat request (default 2000)",
         {"type": positive_int("--max-requests"), "metavar": "N"}),
    Flag("--concurrency", RUN, "--url: data points in flight at once (default 1)",
         {"type": positive_int("--concurrency"), "metavar": "N"}),
    Flag("--backend", RUN, "where data points run: local (this machine's slots, default) | ray (a Ray "
         "cluster) | live (the running server of --url; implied by --url)",
         {"default": "local", "choices": backend_names()}),
    Flag("--ray-address", RUN, "--backend ray: auto | ray://host:port (default: auto)",
         {"metavar": "ADDR"}),
    # a rerun is one point: one slot
    Flag("--slots", RUN, lambda: "parallel slots (default: one per CPU core; "
         f"{for_engines('needs_gpu')}: 1, or --gpus)", {"type": positive_int("--slots")},
         rerun=lambda r: one_slot_args(r.opts.running.slots), resume=True),
    Flag("--gpus", RUN, "one server per GPU id, e.g. 0,1; or per group of GPUs, one "
         "tensor-parallel server across each (0+1,2+3: --tensor-parallel-size 2)",
         {"metavar": "LIST"}, resume=True),
    Flag("--timeout", RUN, "per request, seconds (default 120)",
         {"type": seconds_at_least(1, "any answer"), "default": 120.0}, resume=True),
    Flag("--boot-timeout", RUN, lambda: "server boot, seconds (default: "
         f"{per_engine(lambda c: f'{c.boot_timeout_s:g}')})",
         {"type": seconds_at_least(1, "any server to boot")}),
    Flag("--out", RUN, "results directory (default results/); the reports go there too "
         "unless --reports-dir says otherwise", {"metavar": "DIR", "type": a_path}, resume=True),
    Flag("--reports-dir", RUN, "report directory (default: the --out folder when --out is "
         "given, else reports/)", {"metavar": "DIR", "type": a_path}, resume=True),
    Flag("--resume", RUN, "continue an interrupted run", {"metavar": "RUN_ID"}),
    Flag("--dry-run", RUN, "print the plan and server commands; start nothing",
         {"action": "store_true"}),
    Flag("--no-progress", RUN, "no progress bar", {"action": "store_true"}, resume=True),
    Flag("--baseline", OUTPUT, "fail only on regressions (ok there, not ok now) and lost "
         "coverage (judged there, missing or not judged now) against it, each cell named", {"metavar": "RUN_OR_FILE"}),
    Flag("--allow-fewer", OUTPUT, "with --baseline: do not fail when a cell the baseline "
         "judged is missing or unjudged now", {"action": "store_true"}),
    Flag("--junit", OUTPUT, "write JUnit XML (one testcase per point x phase)",
         {"metavar": "PATH", "type": a_path}),
    Flag("--full", OUTPUT, "do not fold clean rows in the report", {"action": "store_true"}),
    Flag("--bisect", OUTPUT, "exit for git bisect run: 0 every cell tested and ok, 1 a cell "
         "not ok, 125 untestable (a boot-fail, infra or invalid point, an unjudged answer "
         "nothing was judged against, an internal error), 128 a usage error; under "
         "--reference cold / first the unjudged cold / first-configuration answers count "
         "as tested through the answers judged against them; docs/bisect.md",
         {"action": "store_true"}),
    Flag("--gh-issue", OUTPUT, "post the report as a comment on GitHub issue N: through gh "
         "when on PATH, else the REST API with GITHUB_TOKEN (checked before the sweep)",
         {"type": positive_int("--gh-issue"), "metavar": "N"}),
    Flag("--gh-repo", OUTPUT, "--gh-issue through the REST API: OWNER/NAME (default "
         "$GITHUB_REPOSITORY, else the origin remote)", {"metavar": "OWNER/NAME"}),
    Flag("--gh-dry-run", OUTPUT, "--gh-issue: print the request(s), post nothing",
         {"action": "store_true"}),
)


class _Version(argparse.Action):
    """``--version``: computed when asked (it reads git), not when the parser is built."""

    def __init__(self, option_strings, dest, **kw):
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kw)

    def __call__(self, parser, namespace, values, option_string=None):
        from .. import __version__
        from ..provenance import harness_version, source_digest
        print(f"sweep (residue-lab) {__version__}: {harness_version()}; "
              f"source digest {source_digest()}")
        parser.exit(0)


def sweep_parser() -> Parser:
    p = Parser(prog="sweep", description="Residue sweep of an LLM serving engine: one fresh "
               "server per data point, every residue of the chat-templated prompt length, "
               "cold and on a prefix-cache hit, every answer checked verbatim by sha1.",
               formatter_class=_Wrap,
               epilog="Comma-separated values of a configuration flag expand into a matrix, "
               "e.g. --cudagraph FULL_AND_PIECEWISE,PIECEWISE --patches none,all.\n"
               "vLLM's spellings work too: -cc/--compilation-config JSON (--cudagraph), "
               "--speculative-config JSON (--spec, --draft-tokens), --enable-prefix-caching, "
               "--base-url (--url).\n"
               "Sub-verbs: sweep report ..., sweep compare ..., sweep presets, "
               "sweep explain RUN.")
    p.add_argument("--version", action=_Version, help="print the version and the source "
                   "digest (which code runs) and exit")
    groups = {g: p.add_argument_group(g) for g in GROUPS}
    for f in FLAGS:
        kw = dict(f.kw)
        if f.help is not None:
            kw["help"] = f.help_text()
        groups[f.group].add_argument(f.name, **kw)
    return p


def add_flags(parser: argparse.ArgumentParser, names: Sequence[str], **overrides: Any) -> None:
    """A sub-verb takes these sweep flags as ``sweep`` declares them (``overrides``: e.g.
    ``default=None``, "the run's own value")."""
    by_name = {f.name: f for f in FLAGS}
    for name in names:
        f = by_name[name]
        parser.add_argument(f.name, **{**f.kw, "help": f.help_text(), **overrides})


def flag_dest(flag: Flag) -> str:
    """The namespace attribute argparse gives ``flag`` (``--reports-dir`` -> ``reports_dir``)."""
    return flag.kw.get("dest") or flag.name.lstrip("-").replace("-", "_")


def matrix_axes(ns: argparse.Namespace) -> dict[str, list[Any]]:
    """``{resolve keyword: values}`` for every matrix flag, in declaration order; an axis
    left to the preset is ``[None]`` (or ``[UNSET]``: not passed at all)."""
    return {f.axis: f.items(f.name, getattr(ns, flag_dest(f))) for f in FLAGS if f.axis and f.items}


def rerun_command(opts: SweepOptions, cfg: ServingConfig, residue: int, modulus: int,
                  seed: int | None = None, case: str | None = None) -> str:
    """The one command line that reruns exactly this data point (on document ``seed``;
    with --prompts, of case ``case``)."""
    r = Rerun(opts, cfg, residue, modulus, seed, case)
    argv = ["sweep"]
    for f in FLAGS:
        if f.rerun is not None:
            argv += f.rerun(r)
    return shlex.join(argv)


def dest_of(flag: "Flag | str") -> str:
    """The namespace attribute of a flag, given the flag or its name (``--reports-dir`` ->
    ``reports_dir``); ``sweep explain`` and ``--resume`` edit a run's parsed flags."""
    if isinstance(flag, str):
        return next(flag_dest(f) for f in FLAGS if f.name == flag)
    return flag_dest(flag)
