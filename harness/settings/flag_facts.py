"""What some rows of ``flag_checks.RULES`` compute to tell whether they are broken: the
server flags ``--url`` cannot honour, a tensor-parallel size in ``--engine-arg``, what a
``--serve`` line says against the flags beside it, a ``--baseline`` that matches none of
the run's configurations, a GPU named twice in ``--gpus``, a configuration the engine cannot
run (its adapter's ``config_refusal``) or force onto a model runner (``runners``), a
``--prompts`` case ``--reference passage`` cannot judge. Each returns the one line a broken
row says, or nothing; none raises (the table does)."""
from __future__ import annotations

from typing import Any, Iterable, Sequence

from ..names.engine import EngineName
from ..names.isolation import IsolationName
from ..serve.engines import adapter_class
from .flag_values import split
from .flags import ENGINE, FLAGS, matrix_axes

__all__ = ["SERVER_FLAGS", "SERVE_FIELDS", "MATRIX_FLAGS", "url_refused",
           "tensor_parallel_arg", "serve_contradiction", "serve_gpu_groups",
           "baseline_unmatched", "shared_gpus", "config_refusal", "runner_refusal",
           "case_without_expected"]

# the flags that configure or start a server (--url cannot honour them: its server is
# already running as it is): the whole "engine and configuration" group but the two that
# only shape requests, and the flags that start or place servers
_REQUEST_SIDE = ("--served-model-name", "--api-key")
SERVER_FLAGS = tuple([f.name for f in FLAGS if f.group == ENGINE and f.name not in _REQUEST_SIDE]
                     + ["--isolation", "--auto-sample", "--cache-dir", "--launcher", "--backend",
                        "--ray-address", "--slots", "--gpus", "--boot-timeout", "--resume"])
# what a sweep flag written beside --serve must agree with: the line's configuration
_SERVE_FIELD_OF = {"--engine": "engine", "--model": "model", "--spec": "spec",
                   "--draft-tokens": "draft_tokens", "--cudagraph": "cudagraph_mode",
                   "--prefix-cache": "prefix_caching", "--no-prefix-cache": "prefix_caching",
                   "--block-size": "block_size", "--prefix-match-unit": "prefix_match_unit",
                   "--max-model-len": "max_model_len", "--geometry": "geometry",
                   "--kv-cache-memory-bytes": "kv_cache_memory_bytes",
                   "--max-num-batched-tokens": "max_num_batched_tokens"}
SERVE_FIELDS = (*_SERVE_FIELD_OF, "--patches")
MATRIX_FLAGS = tuple(f.name for f in FLAGS if f.axis)
TP_SPELLINGS = ("--tensor-parallel-size", "-tp")


def url_refused(given: dict[str, Any]) -> list[str]:
    """The flags ``given`` (written on the command line) that ``--url`` cannot honour."""
    out = [name for name in given if name in SERVER_FLAGS]
    if given.get("--isolation") == IsolationName.LIVE:   # what --url runs anyway
        out.remove("--isolation")
    return out


def tensor_parallel_arg(engine_args: Sequence[str] | None) -> str | None:
    """An ``--engine-arg`` that sets a TP size: a size comes from a GPU group (``--gpus
    0+1``), or the server boots on one GPU and fails."""
    for a in engine_args or ():
        name = a.split("=", 1)[0]
        if name in TP_SPELLINGS or (name.startswith("-tp") and name[3:].isdigit()):
            return a
    return None


def serve_patches(a: Any) -> list[str]:
    """The patch sets a ``--serve`` line runs: ``--patches`` when written, else the line's."""
    return (matrix_axes(a.ns)["patches"] if a.written("--patches")
            else [a.line.values.get("patches", "none")])


def serve_contradiction(a: Any) -> str | None:
    """A configuration flag written beside ``--serve`` that says otherwise than the line (a
    rerun line repeats them, so agreeing ones are fine)."""
    if a.line is None or a.url or a.engine == EngineName.CMD:
        return None
    patches = serve_patches(a)
    cfg = a.line.config(patches[0])
    for flag, value in a.given.items():
        have = getattr(cfg, _SERVE_FIELD_OF.get(flag, ""), value)
        if str(value).lower() not in (str(have).lower(), "none" if have is None else "-"):
            return (f"--serve: {flag} {value} contradicts the line ({have}); the "
                    "configuration is the line's: change it there")
    if (a.line.engine == EngineName.LAB and a.written("--patches")
            and "patches" in a.line.values and patches != [a.line.values["patches"]]):
        return "--serve: --patches contradicts the lab line's own --patches"
    return None


def serve_gpu_groups(a: Any) -> str | None:
    """A ``--serve`` line with a TP size over ``--gpus`` groups of another size."""
    tp = a.line.tensor_parallel_size if a.line is not None else 1
    if tp > 1 and a.gpus and any(len(g.split("+")) != tp for g in a.gpus.split(",")):
        return (f"--serve: the line runs --tensor-parallel-size {tp}: give GPU groups of {tp} "
                f"(--gpus {'+'.join(str(g) for g in range(tp))})")
    return None


def _sans_patches(label: str | None) -> str | None:
    return " ".join(w for w in label.split() if not w.startswith("patches=")) if label else None


def baseline_unmatched(a: Any) -> str | None:
    """A ``--baseline`` none of whose configurations is one of the run's (by id, by label,
    or by label apart from the patch set, as ``publish/compare`` pairs them): the gate
    would fail on lost coverage after the whole sweep. A baseline that cannot be read is
    said by the session's check (``residue_sweep.Sweep.check``)."""
    if not a.baseline or a.url or not a.configs:
        return None
    recs = a.baseline_records or ()   # read once (Asked); unreadable: None, said elsewhere
    from .configs import config_id
    ours = _keys((config_id(c), c.label()) for c in a.configs)
    theirs = _keys((r.config_id, r.config_label) for r in recs)   # PhaseRecords
    if not recs or ours & theirs:
        return None
    labels = sorted({str(r.config_label) for r in recs})
    return (f"--baseline {a.baseline}: none of its {len(labels)} configuration(s) "
            f"({'; '.join(labels[:3])}{'; ...' if len(labels) > 3 else ''}) is one this "
            "run sweeps; the gate would only count lost coverage. Sweep its configurations "
            "or give the baseline of these")


def _keys(pairs: Iterable[tuple[Any, Any]]) -> set:
    out: set = set()
    for cid, label in pairs:
        out |= {("id", cid), ("label", label), ("sans", _sans_patches(label))}
    return {k for k in out if k[1]}


def shared_gpus(gpus: str | None) -> str | None:
    """``GPU 0`` when ``--gpus`` names a GPU in two slots (``0,0``: two servers side by
    side, which the slot pool allows on purpose)."""
    ids = split(gpus) if gpus else []
    twice = sorted({g for g in ids if ids.count(g) > 1})
    return ("GPU " + ", ".join(twice)) if twice else None


def config_refusal(a: Any) -> str | None:
    """The first configuration the flags expand to that the engine cannot run at all, as its
    adapter says (``config_refusal``; SGLang: a patch set, a match unit other than its page,
    a graph mode it lacks): ``label: why``. A ``--serve`` line's configurations too; none
    for ``--url`` (the server's own)."""
    from .configs import engine_refusal
    return next((line for cfg in a.configs if (line := engine_refusal(cfg))), None)


def runner_refusal(a: Any) -> str | None:
    """A ``--runner`` the engine cannot be forced onto (its adapter's ``runners``)."""
    for cfg in a.configs:
        cls = adapter_class(cfg.engine)
        if cfg.runner != "auto" and cfg.runner not in cls.runners:
            return cls.runner_refusal(cfg.runner)
    return None


def case_without_expected(a: Any) -> str | None:
    """A ``--prompts`` case without ``expected``, which ``--reference passage`` cannot judge
    (the cases as ``Asked.cases`` read them, once)."""
    if a.reference != "passage" or not a.prompts:
        return None
    bare = next((c for c in a.cases if c.expected is None), None)
    if bare is None:
        return None
    return (f"{a.prompts}:{bare.line}: case {bare.id!r} has no \"expected\", so --reference "
            "passage cannot judge it; give \"expected\" or --reference cold or golden:RUN")
