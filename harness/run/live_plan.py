"""The plan of a ``sweep --url`` run: every point on a document of its own.

A live server keeps what it served in its prefix cache, so the only isolation is content:
each point's document is cut from its own seed (drawn from the run's random base, or
``--seed``) and tagged with that seed at the very start of the message, so no cache block
of it is shared with another point, or with another run on the same server. The layout
and size come from one calibration against the server's ``/tokenize``; each document
then costs one more count. Every request counts against ``--max-requests``: a plan that
cannot fit is refused (``PlanError``, exit 2) before the first chat request.
"""
from __future__ import annotations

import hashlib
import shlex
import time

from ..configs import SweepOptions, config_id, modulus_for, select_residues
from ..flags import FLAGS, MEASURE, Rerun
from ..live import LiveTarget, requests_per_point
from ..prompts import PlanError, approx_line_counts, calibrate, own_document_plan
from .plan import Point, RemoteCounter, SweepPlan

__all__ = ["plan_live", "document_seed", "live_rerun"]


def document_seed(nonce: int, cfg_id: str, residue: int) -> int:
    """The document of one point: distinct per run (``nonce``), configuration and residue."""
    digest = hashlib.sha1(f"{nonce}:{cfg_id}:{residue}".encode()).digest()
    return int.from_bytes(digest[:4], "big") & 0x7FFFFFFF


def live_rerun(opts: SweepOptions, url: str, cfg, residue: int, modulus: int) -> str:
    """The command that measures this cell again on the same server (on a new document:
    the old one is in its cache)."""
    r = Rerun(opts, cfg, residue, modulus)
    argv = ["sweep", "--url", url]
    for f in FLAGS:
        if f.group == MEASURE and f.rerun is not None and f.name != "--seed":
            argv += f.rerun(r)
    return shlex.join(argv)


class _BudgetedCounter(RemoteCounter):
    """The server's /tokenize, refusing to go past the request budget while planning."""

    def __init__(self, target: LiveTarget, model: str, timeout: float):
        super().__init__(target.url, model, http=target.http_client(timeout))
        self.budget = target.budget

    def __call__(self, conversations) -> list[int]:
        if self.budget.sent + len(conversations) > self.budget.limit:
            raise PlanError(f"--max-requests {self.budget.limit} is spent before the plan is "
                            f"made ({self.budget.sent} requests to read the server and count "
                            "prompts); raise it")
        return super().__call__(conversations)


def plan_live(opts: SweepOptions) -> SweepPlan:
    """Every point of the one live configuration, each on its own document."""
    t0 = time.monotonic()
    target: LiveTarget = opts.live
    cfg = opts.configs[0]
    cid = config_id(cfg)
    modulus = modulus_for(cfg, opts.modulus)
    residues, note = select_residues(opts.residues, cfg, modulus, seed=opts.seed)
    need_len = opts.context + modulus + opts.max_tokens
    if cfg.max_model_len and need_len > cfg.max_model_len:
        raise PlanError(f"--context {opts.context} + modulus {modulus} + --max-tokens "
                        f"{opts.max_tokens} exceeds the server's max_model_len "
                        f"{cfg.max_model_len}")
    model = opts.served_model_name or target.facts.get("model") or "default"
    counter = _BudgetedCounter(target, model, opts.timeout)
    try:
        cal = calibrate(counter, opts.context, modulus, answer_lines=opts.answer_lines,
                        seed=target.nonce, line_counts=approx_line_counts(counter))
        per_point = requests_per_point(opts.phases)
        budget = target.budget
        need = budget.sent + len(residues) * (1 + per_point)
        if need > budget.limit:
            raise PlanError(
                f"--max-requests {budget.limit}: this sweep needs {need} requests "
                f"({budget.sent} to read the server and calibrate, then per point one to "
                f"size its document and {per_point} to run it, x {len(residues)} points); "
                "raise it or sweep fewer residues")
        points = []
        for r in residues:
            seed = document_seed(target.nonce, cid, r)
            points.append(Point(cfg, cid, r, modulus,
                                own_document_plan(cal, counter, r, modulus, seed),
                                live_rerun(opts, target.url, cfg, r, modulus), seed=seed))
    finally:
        counter.close()
    return SweepPlan(points, {cid: note}, time.monotonic() - t0, {cid: cal.pad_unit})
