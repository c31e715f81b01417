"""How a run builds its phase records: ``RecordBuilder``, the fields every record of a
point shares (configuration requested and effective, slot, isolation, document, restore,
poison) and the records of a phase that produced no answer. Each record is a
``records.PhaseRecord`` from here on (checked as it is built); the store writes its
``as_dict()`` when it writes it."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..records.store import now_iso
from ..serve.cmd_config import cmd_label
from ..serve.facts import ServerFacts
from ..names.engine import EngineName
from ..records.phase_record import PhaseRecord

__all__ = ["RecordBuilder", "mismatches", "failure_fields", "timing_record"]


@dataclass(frozen=True)
class RecordBuilder:
    """Builds the records of one run: the fields every phase record of a point shares,
    and the records of a phase that produced no answer. ``point`` is a ``plan.Point``."""

    run_id: str
    harness_version: str
    isolation: str
    reference: str
    phases: tuple[str, ...]

    def base(self, point: Any, slot: str, node: str, phase: str, info: ServerFacts,
             templated: int | None) -> dict[str, Any]:
        """The fields every record of the point shares (keyword arguments of ``build``)."""
        requested = point.cfg.as_dict()
        effective = info.config or requested
        cmd = point.cfg.engine == EngineName.CMD   # presets never reach a cmd server: cmd_config
        return {
            "run_id": self.run_id, "harness_version": self.harness_version,
            "config_id": point.cfg_id, "config_label": info.config_label or (
                cmd_label(point.cfg, None) if cmd else point.cfg.label()),
            "config": effective, "requested_config": requested,
            "config_mismatch": (list(effective.get("declared_differs") or ()) if cmd
                                else mismatches(requested, effective)),
            "engine": point.cfg.engine, "engine_version": info.engine_version,
            "patches": effective.get("patches") if cmd else point.cfg.patches,
            "patch_status": info.patch_status,
            "model": info.model or point.cfg.model, "slot": slot, "node": node,
            "isolation": getattr(point, "isolation", None) or self.isolation,
            "isolation_run": "auto" if getattr(point, "isolation", None) else None,
            "confirms": getattr(point, "confirms", None),
            "document_seed": getattr(point, "document_seed", None),
            "server_boot": info.server_boot,
            "residue": point.residue,
            "modulus": point.modulus, "target_len": point.plan.target_len,
            "templated_len": templated if templated is not None else point.plan.target_len,
            "templated_len_source": ("server /tokenize" if templated is not None
                                     else "local tokenizer"),
            "phase": phase, "reference": self.reference,
            "boot_s": info.boot_s, "started_at": now_iso(), "rerun": point.rerun,
            "case_id": point.plan.case_id, "prompt_sha1": point.plan.prompt_sha1,
            "modulus_why": getattr(point, "modulus_why", None),
            "restore": info.restore, "poison": _copied(info.poison),
        }

    def build(self, base: dict[str, Any], measured: dict[str, Any],
              extra: dict[str, Any] | None = None) -> PhaseRecord:
        """A whole record, checked against the model (a verdict or phase outside the
        vocabulary is a harness bug and raises here)."""
        return PhaseRecord(**base, **measured, extra=dict(extra or {}))

    def failure(self, point: Any, slot: str, node: str, phase: str, verdict: str,
                reason: str, excerpt: list, info: ServerFacts | None = None,
                templated: int | None = None) -> PhaseRecord:
        expected_chars = len(point.plan.expected or "")   # a prompt case may have none
        return self.build(self.base(point, slot, node, phase, info or ServerFacts(), templated),
                          failure_fields(verdict, reason, excerpt, expected_chars))

    def failures(self, point: Any, slot: str, node: str, verdict: str, reason: str,
                 excerpt: list, extra: dict[str, Any] | None = None) -> list[PhaseRecord]:
        """One record per requested phase (every cell of a table has a value), each with
        ``extra``'s keys set (a field, as ``server_boot``, or a key the model does not name)."""
        out = []
        for phase in self.phases:
            rec = self.failure(point, slot, node, phase, verdict, reason, excerpt)
            out.append(rec.replaced(**extra) if extra else rec)
        return out


def _copied(poison: dict | None) -> dict | None:
    """A record's own copy: a reused server's fills change after the record is built."""
    if poison is None:
        return None
    return {**poison, "fills": [dict(f) for f in poison.get("fills") or ()]} \
        if "fills" in poison else dict(poison)


# Fields compared between requested and effective configuration.
COMPARED = ("cudagraph_mode", "prefix_caching", "block_size", "prefix_match_unit",
            "max_model_len", "method", "draft_tokens")


def mismatches(requested: dict[str, Any], effective: dict[str, Any]) -> list[str]:
    out = []
    for key in COMPARED:
        if key in effective and effective.get(key) != requested.get(key):
            out.append(f"{key}: requested {requested.get(key)!r}, server runs {effective.get(key)!r}")
    return out


def failure_fields(verdict: str, reason: str, excerpt: list, expected_chars: int) -> dict:
    """The measured fields of a phase that produced no answer (boot-fail, crash, ...)."""
    return {"prompt_tokens": None, "cached_tokens": None, "computed_tail": None,
            "answer": "", "content_was_null": False, "sha1": None,
            "reference_sha1": None, "expected_chars": expected_chars,
            "verbatim_n": 0, "verbatim_total": 0, "repeats": 0, "finish_reason": None,
            "completion_tokens": None, "tok_per_step": None, "latency_s": None,
            "verdict": verdict, "reason": reason, "log_excerpt": list(excerpt)}


def timing_record(*, boot: float = 0.0, requests: float = 0.0, teardown: float = 0.0,
                  point: float | None = None) -> dict[str, float]:
    """Where one point's time went (the driver sums these into the manifest's timing);
    a restored point adds ``restore`` (the seconds its server took to be restored)."""
    t = {"boot": boot, "requests": requests, "teardown": teardown}
    if point is not None:
        t["point"] = point
    return t
