"""``SweepOptions``: one typed sweep request in four parts, each read by the rooms it serves.

- ``serving``   the engine and what it serves (configurations, model, how a server starts):
                the server pool, the adapters, explain's rungs;
- ``measure``   what is measured (residues, phases, reference, prompts, answer length,
                logprobs, background load): the planner, the runner, the judges;
- ``running``   how the sweep runs (isolation, slots, timeouts, backend, ``--url``'s
                target, resume): the session, the backends, the driver;
- ``outputs``   where results go and what gates on them (files, JUnit, the issue comment,
                the baseline): the publishers.

``harness/options.build_options`` builds each part once from the flags (every cross-flag rule
before, in ``flag_checks.RULES``); nothing here validates. A flag's value is its field, under
the flag's ``dest``, in one part (``FIELD_PART`` says which); ``replace`` changes fields of
any part by name.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engine.presets import ServingConfig

from ..prompts.cases import PromptCase
from ..records.phase_record import PhaseRecord
from ..serve.live_target import LiveTarget
from ..serve.serve_line import ServeLine
from ..serve.slots import Slot

__all__ = ["ServingPart", "MeasurePart", "RunningPart", "OutputsPart", "SweepOptions",
           "FIELD_PART", "PARTS"]


@dataclass(frozen=True)
class ServingPart:
    """The engine and what it serves."""
    engine: str
    configs: tuple[ServingConfig, ...]
    model: str | None
    served_model_name: str | None
    server_cmd: str | None              # --engine cmd: the server line template
    draft_model: str | None = None      # --engine vllm: drafter checkpoint
    engine_args: tuple[str, ...] = ()   # --engine vllm: extra server arguments
    served_config: str | None = None    # --engine cmd: --served-config JSON, as given
    # ... and its fields, parsed once (option_fields.Settled.served)
    served_fields: dict | None = field(default=None, compare=False)
    serve: str | None = None            # --serve LINE: the server line swept as written
    # ... and as read, once (settings/asked.Asked.line)
    serve_line: ServeLine | None = field(default=None, compare=False)
    cache_dir: Path | None = None       # --cache-dir: shared compile/Triton caches (vllm)
    launcher: str = "plain"             # plain | prefork
    poison: str = "auto"                # --poison auto | on | off (harness/serve/poison.py)


@dataclass(frozen=True)
class MeasurePart:
    """What is measured at each point."""
    residues: str
    context: int
    phases: tuple[str, ...]
    reference: str                      # passage | cold | golden:RUN
    modulus: int | None                 # None = auto (each configuration's hit granularity)
    max_tokens: int
    answer_lines: int = 3
    seed: int = 0
    # the document seeds every residue is measured on (--seed's list; () = (seed,)): one
    # name from the options to the record (Point.document_seed, the record's document_seed)
    documents: tuple[int, ...] = ()
    prompts: str | None = None          # --prompts FILE, as given (reruns spell it)
    cases: tuple[PromptCase, ...] = ()  # its validated cases (after --case)
    logprobs: int = 0                   # top_logprobs asked per answer token; 0 = not asked
    logprobs_default: int = 0           # the engine's default (a rerun repeats only a change)
    prompt_logprobs: bool = False       # --prompt-logprobs: measured vs cold prompt logprobs
    load: int = 0                       # --load N: background conversations beside each request
    load_mode: str = "steady"           # --load-mode steady | cancel (run/load.py)

    def __post_init__(self) -> None:
        if not self.documents:   # one document: the seed's (a caller that gave no list)
            object.__setattr__(self, "documents", (self.seed,))

    @property
    def golden_run(self) -> str | None:
        return self.reference.split(":", 1)[1] if self.reference.startswith("golden:") else None


@dataclass(frozen=True)
class RunningPart:
    """How the sweep runs."""
    isolation: str
    slots: tuple[Slot, ...]
    timeout: float
    boot_timeout: float
    resume: str | None
    dry_run: bool
    backend: str = "local"              # a name in harness.backends.BACKENDS
    ray_address: str | None = None
    # --url: the running server swept; None: servers are started
    live: LiveTarget | None = field(default=None, compare=False)
    api_key: str | None = None
    auto_sample: int = 4                # --isolation auto: seeded ok residues confirmed fresh
    # boots at once (0: one per slot) and a first boot alone with the cold-compile timeout
    # (backends/local.BootGate): explain's rungs are as many configurations, each a compile
    boot_parallel: int = 0
    boot_warmup: bool = False
    no_progress: bool = False           # --no-progress: the terminal shows no progress bar


@dataclass(frozen=True)
class OutputsPart:
    """Where the results go and what gates on them."""
    out: Path
    reports_dir: Path
    junit: Path | None = None
    full: bool = False
    gh_issue: int | None = None
    gh_repo: str | None = None          # --gh-issue through the REST API: OWNER/NAME
    gh_dry_run: bool = False            # --gh-issue: print the request, send nothing
    baseline: str | None = None
    # --baseline's records, read once as the options were built (settings/asked.Asked); None:
    # not read there (options built by hand, or unreadable): the session reads and says why
    baseline_records: tuple[PhaseRecord, ...] | None = field(default=None, compare=False,
                                                              repr=False)
    allow_fewer: bool = False           # --baseline: coverage may shrink
    bisect: bool = False                # --bisect: the exit code git bisect run reads


PARTS: dict[str, type] = {"serving": ServingPart, "measure": MeasurePart,
                          "running": RunningPart, "outputs": OutputsPart}
# every field of a part -> the part's name on SweepOptions (a flag's dest names one field)
FIELD_PART: dict[str, str] = {f.name: part for part, cls in PARTS.items()
                              for f in dataclasses.fields(cls)}


@dataclass(frozen=True)
class SweepOptions:
    """One sweep request: its four parts, the warning lines of ``flag_checks.RULES``, the
    command line it came from and the flags as parsed (the manifest keeps them, versioned,
    and ``--resume`` / ``sweep explain`` rebuild the options from them)."""
    serving: ServingPart
    measure: MeasurePart
    running: RunningPart
    outputs: OutputsPart
    flag_notes: tuple[str, ...] = ()
    argv: tuple[str, ...] = field(default=(), compare=False)
    flags: dict = field(default_factory=dict, compare=False)

    def value(self, name: str) -> Any:
        """A field of any part by its name (a flag's dest; ``settings/flags`` reruns)."""
        return getattr(getattr(self, FIELD_PART[name]), name)

    def replace(self, **changes: Any) -> "SweepOptions":
        """These options with fields changed by name, a part's or their own."""
        by_part: dict[str, dict[str, Any]] = {}
        own = {n: v for n, v in changes.items() if n not in FIELD_PART}
        for name, v in changes.items():
            if name in FIELD_PART:
                by_part.setdefault(FIELD_PART[name], {})[name] = v
        return dataclasses.replace(self, **own, **{
            part: dataclasses.replace(getattr(self, part), **ch) for part, ch in by_part.items()})
