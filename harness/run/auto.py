"""``--isolation auto``: a sweep of every residue on reused servers (the *reuse pass*:
``restore`` where the engine can return a server to its just-booted state, else
``reset``), then fresh-server confirmation of what that pass can hide, in the same run.

Why: on real vLLM 0.26.0 (H200, tiny hybrid, ngram k = 2 and k = 4) a reset sweep of all
128 residues was clean where a fresh server broke the rule's residue on its first, cold
request (issue 17). Reset is cheap (one boot per configuration), fresh is the standard
(one boot per point), so auto runs every residue on reset servers and these on fresh ones:

- every residue whose reset point was not ok in any phase (known only once it ran: the
  backend asks :func:`needs_confirmation` as each reset point finishes);
- the rule's residues and their neighbours, ``k, k + 1, k + 2`` (mod the modulus), on two
  documents or more: where the rule (``bugb.predict``) names residues, those and their
  neighbours; where it predicts no break but the configuration drafts ``k`` tokens with
  prefix caching on, ``k + 1`` and its neighbours all the same (the control: a fresh
  server at the shape is what shows the fix or the graph mode, not the reset, kept the
  cell clean). With one ``--seed``, one more document (the next seed) is planned for these
  residues only, on both passes;
- a seeded sample of ``--auto-sample`` other residues per configuration and document.

Stability is measured, not assumed (issue 32): a fresh point of an auto run that is not ok
in some phase runs on a second fresh server, and on a third where the two differ in a
verdict or in bytes (:func:`more_servers`); its records are the worst server's, each with
``confirmed_on`` (every server's verdict and sha1), so an unstable cell is never summarised
as ok, and the report says per cell "reproduced on N servers" or "unstable: ok on 1 of 3"
(``report/auto.stability``).

Points carry the pass (``Point.isolation``: ``restore`` or ``reset``, and ``fresh``) and
why a fresh point runs (``Point.confirms``); records carry both (``isolation``,
``confirms``) and ``isolation_run: auto``. A restore pass is confirmed exactly as a reset
pass: it is trusted where fresh servers agree with it, and the report says how often.
"""
from __future__ import annotations

import dataclasses
import random
from typing import Any, Iterable, Sequence

from engine.presets import ServingConfig

from ..judge import bugb
from ..serve.engines import auto_reuse_pass
from ..records.recordkeys import point_key
from ..names.verdict import NOT_FAILED, worst
from ..names.isolation import REUSE_ISOLATIONS
from .matrix_reference import rejudge
from ..records.phase_record import PhaseRecord
from ..names.isolation import IsolationName

__all__ = ["AUTO_MIN_DOCUMENTS", "rule_neighbourhood", "auto_extra_documents", "auto_passes",
           "needs_confirmation", "fresh_twin", "resume_confirmations", "late_confirmations",
           "CONFIRMS", "CONFIRM_SERVERS", "more_servers", "settle"]

AUTO_MIN_DOCUMENTS = 2
# Why a fresh point of an auto run runs (the record's ``confirms``).
CONFIRMS = ("not ok on restore", "not ok on reset", "rule neighbourhood", "sample")
# Fresh servers a non-ok cell of an auto run is measured on, and at most (one more where
# the first two differ)
CONFIRM_SERVERS, CONFIRM_SERVERS_MAX = 2, 3


def rule_neighbourhood(cfg: ServingConfig, modulus: int, *, load: int = 0,
                       lengths: dict[int, set[int]] | None = None) -> list[int]:
    """``k, k + 1, k + 2`` around each residue the rule names (or around ``k + 1`` of the
    verify shape where it names none but the shape can occur), and the residues of the
    1-token tails the rule names to measure (vLLM >= 0.31's V2 carve-out) or, where a
    chunk budget cuts the prompt, of the 1-token budget tail; [] without drafting, or
    without prefix caching and a chunk budget (no final chunk is cut then). ``load`` and
    ``lengths`` (residue -> templated lengths planned): the rule under ``--load N``."""
    k = int(cfg.draft_tokens or 0) if cfg.method else 0
    budget = cfg.max_num_batched_tokens
    if not k or not (cfg.prefix_caching or budget):
        return []
    pred = bugb.predict(cfg.as_dict(), modulus, load=load,
                        lengths=lengths if load else None)
    centres = pred.residues or [(k + 1) % modulus]
    near = {(c + d) % modulus for c in centres for d in (-1, 0, 1)} | set(pred.watch)
    if budget and modulus % budget == 0:
        near.add(1)
    return sorted(near)


def auto_extra_documents(opts: Any, cfg: ServingConfig, modulus: int,
                         swept: Iterable[int]) -> list[tuple[int, list[int]]]:
    """(seed, residues) of the documents auto adds so that the rule's neighbourhood (of
    the ``swept`` residues) is measured on ``AUTO_MIN_DOCUMENTS`` documents; [] outside
    auto or with enough seeds."""
    docs = tuple(opts.measure.documents)
    if opts.running.isolation != IsolationName.AUTO or len(docs) >= AUTO_MIN_DOCUMENTS:
        return []
    residues = sorted(set(rule_neighbourhood(cfg, modulus)) & set(swept))
    if not residues:
        return []
    out, seed = [], max(docs)
    for _ in range(AUTO_MIN_DOCUMENTS - len(docs)):
        seed += 1
        out.append((seed, residues))
    return out


def auto_passes(points: Sequence[Any], opts: Any) -> list[Any]:
    """The plan of an auto run: every point on the reuse pass (restore where the engine
    can, else reset), then the fresh points known before anything runs (rule
    neighbourhood, sample), in plan order."""
    reuse = auto_reuse_pass(opts.serving.engine)
    reset = [dataclasses.replace(p, isolation=reuse) for p in points]
    fresh: list[Any] = []
    by_doc: dict[tuple, list[Any]] = {}
    for p in points:
        by_doc.setdefault((p.cfg_id, p.document_seed), []).append(p)
    for (cid, seed), pts in by_doc.items():
        lengths: dict[int, set[int]] = {}
        for p in pts:
            lengths.setdefault(p.residue, set()).add(p.plan.target_len)
        near = set(rule_neighbourhood(pts[0].cfg, pts[0].modulus,
                                      load=opts.measure.load, lengths=lengths))
        rest = [p for p in pts if p.residue not in near]
        rng = random.Random(f"auto-sample:{opts.measure.seed}:{cid}:{seed}")
        sample = {p.residue for p in rng.sample(rest, min(opts.running.auto_sample, len(rest)))}
        for p in pts:
            if p.residue in near:
                fresh.append(fresh_twin(p, "rule neighbourhood"))
            elif p.residue in sample:
                fresh.append(fresh_twin(p, "sample"))
    return reset + fresh


def fresh_twin(point: Any, confirms: str) -> Any:
    """The same prompt on a fresh server, saying why it runs."""
    return dataclasses.replace(point, isolation="fresh", confirms=confirms)


def needs_confirmation(point: Any, records: Iterable[PhaseRecord]) -> bool:
    """A reuse (restore or reset) point of an auto run that was not ok in some phase. ``unjudged`` does not
    count: it is what the cold phase under ``--reference cold`` always is, and what every
    answer is during a run under ``first`` / ``consensus`` (judged after the run), so it
    says nothing about the reset server; a collapse, a crash or a failure still does."""
    return point.isolation in REUSE_ISOLATIONS and any(_suspect(r) for r in records)


def _suspect(r: PhaseRecord) -> bool:
    return r.verdict not in NOT_FAILED


def late_confirmations(reset: Sequence[tuple[Any, list[PhaseRecord]]], mode: str,
                       config_order: Sequence[str]) -> list[Any]:
    """Under ``--reference first`` / ``consensus`` a reset answer is judged only against
    the other answers: when the reset pass is over, its records are judged as the run's
    end will judge them, and every reset point not ok then gets its fresh twin (a
    ``diverged`` cell, the usual shape of real Bug B, was never confirmed before).
    ``reset``: (point, its records) of every finished reset point."""
    judged = rejudge([r for _, recs in reset for r in recs], mode, config_order)
    bad = {point_key(r) for r in judged if _suspect(r)}
    return [fresh_twin(p, f"not ok on {p.isolation}") for p, _ in reset if p.key in bad]


def resume_confirmations(planned: Sequence[Any], todo: Sequence[Any],
                         records: Iterable[PhaseRecord]) -> list[Any]:
    """On ``--resume`` of an auto run: fresh twins of finished reuse points that were not
    ok, whose confirmation is neither on disk nor planned (it was added at run time)."""
    bad: set[tuple] = set()
    fresh_done: set[tuple] = set()
    for r in records:
        key = point_key(r)[:4]   # (configuration, case, residue, document)
        if r.isolation in REUSE_ISOLATIONS and _suspect(r):
            bad.add(key)
        elif r.isolation == IsolationName.FRESH:
            fresh_done.add(key)
    pending = {p.key[:4] for p in todo if p.isolation == IsolationName.FRESH}
    planned_fresh = {p.key[:4] for p in planned if p.isolation == IsolationName.FRESH}
    out = []
    for p in planned:
        key = p.key[:4]
        if (p.isolation in REUSE_ISOLATIONS and key in bad and key not in fresh_done
                and key not in pending and key not in planned_fresh):
            out.append(fresh_twin(p, f"not ok on {p.isolation}"))
    return out


def more_servers(point: Any, runs: Sequence[Sequence[PhaseRecord]]) -> bool:
    """Whether a fresh point of an auto run needs another fresh server: ``runs`` holds
    its records per server so far. Not ok in some phase on some server: at least
    ``CONFIRM_SERVERS``; where those disagree, one more (``CONFIRM_SERVERS_MAX``)."""
    if getattr(point, "isolation", None) != IsolationName.FRESH or not getattr(point, "confirms", None):
        return False
    if not runs or len(runs) >= CONFIRM_SERVERS_MAX:
        return False
    if not any(_suspect(r) for recs in runs for r in recs):
        return False
    return len(runs) < CONFIRM_SERVERS or not _same(runs)


def _same(runs: Sequence[Sequence[PhaseRecord]]) -> bool:
    return all(len({(r.verdict, r.sha1) for r in phase}) == 1
               for phase in zip(*runs))


def settle(runs: Sequence[Sequence[PhaseRecord]]) -> list[PhaseRecord]:
    """One record per phase from the servers' ``runs``: the worst verdict's record (the
    first server's on a tie), with ``confirmed_on`` listing every server's verdict, sha1
    and log; one run is returned as it is."""
    if len(runs) == 1:
        return list(runs[0])
    out = []
    for phase in zip(*runs):
        bad = worst(r.verdict or "invalid" for r in phase)
        pick = next(r for r in phase if r.verdict == bad)
        out.append(pick.replaced(confirmed_on=[
            {"verdict": r.verdict, "sha1": r.sha1,
             "log": r.boot.log if r.boot else None} for r in phase]))
    return out

