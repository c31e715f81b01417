"""The flags that only make sense with another one, or contradict each other, as one table
(``RULES``): each ``Rule`` names the flags it relates, when they are broken together, and
the one ``UsageError`` line that says so, never silence (issue 27). Every cross-flag check
of a sweep is a row here (issue 47), an engine's too (its adapter's facts: what it takes,
whether it restores, fills or forks, which configurations and model runners it can run),
read off ``Asked`` (``settings/asked.py``: the parsed flags, the flags the command line
wrote, a ``--serve`` line and ``--phases`` read once, and, where a rule needs them, the
configurations the flags expand to, the ``--prompts`` cases and the ``--baseline``
records, each read once). ``options.build_options`` checks every rule, in the table's
order, before anything runs; a row that ``warns`` says its line once and the sweep goes on
(``--gpus 0,0``). The one check of written flags that is not a row compares them with a
stored file: the flags beside ``--resume`` against its run's manifest
(``run/resume.resumed_namespace``: the namespace the rows read is built from it). What only
the plan can tell (a reference's length against ``--max-tokens``, a golden run's prompts)
is a ``PlanError`` before any point runs (``run/plan.py``, ``run/golden.py``)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

from ..errors import UsageError
from .asked import Asked
from ..names.phase import PhaseName
from ..names.history import HISTORIES
from .flag_values import split
from ..serve.engine_help import can_fork, for_engines
from ..serve.engines import ADAPTERS, engines_where
from ..names.engine import EngineName
from ..names.isolation import IsolationName, restores as isolation_restores
from ..serve.poison import why_not as poison_why_not
from . import flag_facts as facts
from .backend_registry import LIVE_BACKEND

__all__ = ["Rule", "RULES", "check_flag_use", "rule_of"]

HISTORY_ROWS = {h.name: h for h in HISTORIES}


@dataclass(frozen=True)
class Rule:
    flags: tuple[str, ...]                 # the flags it relates, as the user writes them
    broken: Callable[[Asked], bool]
    says: Callable[[Asked], str]
    warns: bool = False                    # a line worth saying once; the sweep goes on

    def check(self, asked: Asked) -> str | None:
        """The warning line of a broken ``warns`` row; a broken row is a ``UsageError``."""
        if not self.broken(asked):
            return None
        if self.warns:
            return self.says(asked)
        raise UsageError(self.says(asked))


def _engine(a: Asked):
    return ADAPTERS.get(a.engine)


def _first_written(a: Asked, names: Sequence[str]) -> str:
    return next(n for n in names if a.written(n))


def _poison_why(a: Asked) -> str | None:
    """Why ``--poison on`` cannot fill this engine's servers (None: it can)."""
    cls = _engine(a)
    args = tuple(a.engine_arg or ())
    if a.line is not None and a.line.has("--worker-extension-cls"):
        args += ("--worker-extension-cls",)   # the line's own extension
    return poison_why_not(cls, args, bool(a.url)) if cls else None


_PROMPTS_ONLY = ("--context", "--answer-lines")

RULES: tuple[Rule, ...] = (
    Rule(("--poison", "--engine"),   # an engine that refuses the fill outright (SGLang)
         lambda a: a.poison == "on" and bool(getattr(_engine(a), "poison_refusal", None)),
         lambda a: f"--poison on: --engine {a.engine}: {_engine(a).poison_refusal}; use "
                   "--poison auto or off"),
    Rule(("--poison", "--engine", "--engine-arg", "--serve", "--url"),
         lambda a: a.poison == "on" and bool(_poison_why(a)),
         lambda a: f"--poison on: {_poison_why(a)}; use --poison auto or off"),
    Rule(("--url", *facts.SERVER_FLAGS), lambda a: bool(a.url) and bool(facts.url_refused(a.given)),
         lambda a: "--url sweeps a server that is already running, as it runs; these flags "
                   f"configure or start a server: {', '.join(facts.url_refused(a.given))}"),
    Rule(("--url", "--prompts", "--seed"),
         lambda a: bool(a.url) and (bool(a.prompts) or len(a.seed or ()) > 1),
         lambda a: "--url gives every point a document of its own: --prompts cases and "
                   "--seed lists repeat a text across points, which a live server caches"),
    Rule(("--url", "--load"), lambda a: bool(a.url) and bool(a.load),
         lambda a: "--load sends background conversations of its own; on a running service "
                   "that is added traffic, so --url does not send it"),
    Rule(("--url", "--reference"),
         lambda a: bool(a.url) and a.reference not in ("passage", "cold"),
         lambda a: f"--reference {a.reference}: --url judges each point against its own "
                   "document (passage) or its cold answer (cold)"),
    Rule(("--server-cmd", "--engine"),
         lambda a: a.engine != EngineName.CMD and bool(a.server_cmd),
         lambda a: "--server-cmd is only for --engine cmd"),
    Rule(("--ray-address", "--backend"),
         lambda a: bool(a.ray_address) and a.backend != "ray",
         lambda a: "--ray-address is only for --backend ray"),
    Rule(("--slots", "--gpus"), lambda a: bool(a.slots and a.gpus),
         lambda a: "--slots and --gpus are exclusive: --gpus gives one slot per GPU"),
    Rule(("--cache-dir", "--engine"),
         lambda a: bool(a.cache_dir) and bool(_engine(a)) and not _engine(a).compile_caches,
         lambda a: f"--cache-dir is for {for_engines('compile_caches')} (the {a.engine} "
                   "engine compiles nothing)"),
    Rule(("--launcher", "--engine"),
         lambda a: a.launcher == "prefork" and bool(_engine(a)) and not can_fork(_engine(a)),
         lambda a: f"--launcher prefork: --engine {a.engine} cannot be forked from a "
                   f"pre-imported parent ({for_engines(can_fork)} can); use --launcher plain"),
    Rule(("--launcher", "--backend"), lambda a: a.launcher != "plain" and a.backend != "local",
         lambda a: f"--launcher {a.launcher} is for the local backend"),
    Rule(("--max-requests", "--url"), lambda a: not a.url and bool(a.max_requests),
         lambda a: "--max-requests is for --url (a running server); --slots sets how many "
                   "servers a sweep starts"),
    Rule(("--concurrency", "--url"), lambda a: not a.url and bool(a.concurrency),
         lambda a: "--concurrency is for --url (a running server); --slots sets how many "
                   "servers a sweep starts"),
    Rule(("--isolation", "--url"), lambda a: not a.url and a.isolation == IsolationName.LIVE,
         lambda a: "--isolation live is how --url sweeps a running server: give --url URL"),
    Rule(("--auto-sample",), lambda a: a.auto_sample < 0,
         lambda a: "--auto-sample must be at least 0"),
    Rule(("--auto-sample", "--isolation"),
         lambda a: a.auto_sample != 4 and a.isolation != IsolationName.AUTO,
         lambda a: "--auto-sample is for --isolation auto"),
    Rule(("--load-mode", "--load"), lambda a: a.load_mode != "steady" and not a.load,
         lambda a: "--load-mode is for --load N (N background conversations)"),
    Rule(("--prefix-cache", "--no-prefix-cache"),
         lambda a: a.written("--prefix-cache") and a.written("--no-prefix-cache"),
         lambda a: "--prefix-cache and --no-prefix-cache contradict each other; give one"),
    Rule(("--no-prefix-cache", "--phases"),
         lambda a: a.written("--no-prefix-cache") and bool(a.hit_phases),
         lambda a: f"--no-prefix-cache: the {' and '.join(a.hit_phases)} phase cannot hit "
                   "without the prefix cache (it would be one more cold request); give "
                   "--phases cold"),
    Rule(("--prompts", *_PROMPTS_ONLY),
         lambda a: bool(a.prompts) and any(a.written(n) for n in _PROMPTS_ONLY),
         lambda a: f"{_first_written(a, _PROMPTS_ONLY)} is not used with --prompts: a case "
                   "is its own prompt, padded to each residue (docs/prompts.md)"),
    Rule(("--allow-fewer", "--baseline"), lambda a: bool(a.allow_fewer) and not a.baseline,
         lambda a: "--allow-fewer is for --baseline (it accepts less coverage than the "
                   "baseline's)"),
    Rule(("--served-config", "--engine"),
         lambda a: bool(a.served_config) and a.engine != EngineName.CMD,
         lambda a: "--served-config is for --engine cmd (the lab and vllm engines report "
                   "what they run)"),
    Rule(("--seed", "--prompts"), lambda a: len(a.seed or ()) > 1 and bool(a.prompts),
         lambda a: "--seed lists are documents and --prompts cases have none: give one --seed"),
    Rule(("--bisect", "--baseline"), lambda a: bool(a.bisect) and bool(a.baseline),
         lambda a: "--bisect and --baseline are exclusive: a bisect judges each build alone"),
    Rule(("--engine-arg", "--gpus"), lambda a: bool(facts.tensor_parallel_arg(a.engine_arg)),
         lambda a: f"--engine-arg={facts.tensor_parallel_arg(a.engine_arg)}: the tensor-parallel "
                   "size comes from the GPU groups: --gpus 0+1,2+3 runs each server across two "
                   "GPUs with --tensor-parallel-size 2"),
    Rule(("--serve", "--url", "--engine"),
         lambda a: bool(a.serve) and (bool(a.url) or a.engine == EngineName.CMD),
         lambda a: "--serve starts your server line: not with --url or --engine cmd"),
    Rule(("--serve", *facts.SERVE_FIELDS), lambda a: bool(facts.serve_contradiction(a)),
         lambda a: facts.serve_contradiction(a)),
    Rule(("--serve", "--gpus"), lambda a: bool(facts.serve_gpu_groups(a)),
         lambda a: facts.serve_gpu_groups(a)),
    Rule(("--draft-model", "--engine"),
         lambda a: bool(a.draft_model) and bool(_engine(a)) and not _engine(a).takes_draft_model,
         lambda a: "--draft-model is for --engine " + engines_where(lambda c: c.takes_draft_model)),
    Rule(("--engine-arg", "--engine"),
         lambda a: bool(a.engine_arg) and bool(_engine(a)) and not _engine(a).takes_engine_args,
         lambda a: "--engine-arg is for --engine "
                   f"{engines_where(lambda c: c.takes_engine_args)} (--engine {a.engine}: put "
                   "the argument in --server-cmd)"),
    Rule(("--isolation", "--engine"),
         lambda a: isolation_restores(a.isolation) and bool(_engine(a))
         and not _engine(a).can_restore(),
         lambda a: _engine(a).restore_refusal()),
    Rule(("--isolation", "--backend"),
         lambda a: a.backend == "ray" and a.isolation != IsolationName.FRESH,
         lambda a: f"--isolation {a.isolation} is for the local backend; --backend ray runs "
                   "every point on its own fresh server"),
    Rule(("--backend", "--url"), lambda a: a.backend == LIVE_BACKEND and not a.url,
         lambda a: "--backend live sweeps the running server of --url URL; give --url (the "
                   "local and ray backends start their own servers)"),
    Rule(("--reference", "--phases"),
         lambda a: a.reference == "cold" and PhaseName.COLD not in a.phases,
         lambda a: "--reference cold needs the cold phase in --phases"),
    # every line of the document is at least one token: a budget under the line count
    # cuts every answer short, which the sweep would judge an engine's break (issue 50)
    Rule(("--max-tokens", "--answer-lines"),
         lambda a: not a.prompts and a.max_tokens < a.answer_lines,
         lambda a: f"--max-tokens {a.max_tokens} cannot hold the reference: --answer-lines "
                   f"{a.answer_lines} lines are at least {a.answer_lines} tokens; raise "
                   "--max-tokens or lower --answer-lines"),
    Rule(("--baseline", *facts.MATRIX_FLAGS), lambda a: bool(a.baseline_unmatched),
         lambda a: a.baseline_unmatched),
    Rule(("--engine", "--model"),
         lambda a: bool(_engine(a)) and _engine(a).needs_model and not a.model and not a.serve,
         lambda a: f"--engine {a.engine} needs --model (a local model directory or HF id)"),
    Rule(("--engine", "--server-cmd"), lambda a: a.engine == EngineName.CMD and not a.server_cmd,
         lambda a: "--engine cmd needs --server-cmd 'TEMPLATE' with a {port} placeholder"),
    Rule(("--gh-repo", "--gh-dry-run", "--gh-issue"),
         lambda a: not a.gh_issue and (bool(a.gh_repo) or bool(a.gh_dry_run)),
         lambda a: "--gh-repo and --gh-dry-run go with --gh-issue N"),
    Rule(("--case", "--prompts"), lambda a: bool(a.case) and not a.prompts,
         lambda a: "--case is only for --prompts FILE"),
    Rule(("--gpus",), lambda a: bool(facts.shared_gpus(a.gpus)), warns=True,
         says=lambda a: f"--gpus {a.gpus}: {facts.shared_gpus(a.gpus)} runs two servers side "
                        "by side on one GPU (each gets part of its memory); give each GPU "
                        "once for one server per GPU"),
    Rule(("--async-scheduling", "--engine"),
         lambda a: bool(a.async_scheduling) and not getattr(_engine(a), "async_scheduling", True),
         lambda a: f"--async-scheduling: --engine {a.engine} has no switch for it (vLLM's "
                   "--async-scheduling / --no-async-scheduling)"),
    Rule(("--url", "--history"), lambda a: bool(a.url) and bool(_unprovable_live(a)),
         lambda a: f"--url: --history {','.join(_unprovable_live(a))} cannot be proven on a "
                   "server shared with other traffic (its proof needs the server's own log, its "
                   "prefix cache and its pool to itself); sweep it on started servers"),
    Rule(("--history", "--load"),
         lambda a: bool(a.load) and any(h != "none" for h in split(a.history or "")),
         lambda a: "--history and --load are exclusive: a history proves what ran before the "
                   "measured request, and background load would be part of it"),
    Rule(("--history", "--phases"), lambda a: bool(_history_missing(a)),
         lambda a: "--history {0} runs at the {1} phase: --phases must have {2}".format(
             *_history_missing(a), ", ".join(dict.fromkeys(("cold", _history_missing(a)[1]))))),
    # what the engine makes of each configuration, read off its adapter (issue 47): the
    # last rows, where the configurations were built before (and the runner at the session)
    Rule(("--engine", "--serve", "--patches", "--prefix-match-unit", "--block-size",
          "--cudagraph"), lambda a: bool(facts.config_refusal(a)),
         lambda a: facts.config_refusal(a)),
    Rule(("--prompts", "--reference"), lambda a: bool(facts.case_without_expected(a)),
         lambda a: facts.case_without_expected(a)),
    Rule(("--runner", "--engine"), lambda a: bool(facts.runner_refusal(a)),
         lambda a: facts.runner_refusal(a)),
)


def _unprovable_live(a: Asked) -> list[str]:
    """The ``--history`` names a shared live server cannot prove (names/history.py live_ok)."""
    return [h for h in split(a.history or "") if h in HISTORY_ROWS and not HISTORY_ROWS[h].live_ok]


def _history_missing(a: Asked) -> tuple[str, str] | None:
    """(history, its phase) for the first ``--history`` whose phases ``--phases`` lacks: each
    runs at its row's phase (names/history.py), and those at a hit after the cold one."""
    for name in split(a.history or ""):
        row = HISTORY_ROWS.get(name)
        if row is None or row.at is None:
            continue
        if row.at not in a.phases or PhaseName.COLD not in a.phases:
            return name, row.at
    return None


def check_flag_use(asked: Asked) -> tuple[str, ...]:
    """Every rule of ``RULES``, in order: the first broken one is a ``UsageError``; the
    lines of the broken ``warns`` rows come back, to be said once. The ``--serve`` line
    and ``--phases`` are read first: a mistake in either is its own line, before any rule."""
    asked.line, asked.phases   # noqa: B018 (each raises its UsageError here)
    said = (rule.check(asked) for rule in RULES)
    return tuple(line for line in said if line)


def rule_of(*flags: str) -> Rule:
    """The rule relating exactly ``flags`` (another command's parser checks it too:
    ``sweep explain``'s ``--slots`` / ``--gpus``)."""
    return next(r for r in RULES if r.flags == flags)
