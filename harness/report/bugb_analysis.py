"""The report's Bug B analysis: the rule (``harness.judge.bugb``) applied to a configuration's
records, and whether the sweep agrees with it."""
from __future__ import annotations

from ..judge.bugb import Prediction, armed_batch, hit_granularity, predict
from ..text.phrase import Phrase
from ..text.ranges import residues_phrase
from ..names.verdict import BUG_VERDICTS, CLEAN, NOT_LONE, UNJUDGED
from ..names.phase import PhaseName
from .model import ConfigData
from ..names.history import HISTORY_NAMES, NONE, history_row

__all__ = ["predict_bug_b", "config_hit_granularity", "agreement", "history_rule"]


def config_hit_granularity(cd: ConfigData) -> tuple[int | None, int]:
    """gcd of the positive ``cached_tokens`` of a configuration's records (see bugb)."""
    return hit_granularity(r.cached_tokens for r in cd.records)


def predict_bug_b(cd: ConfigData) -> Prediction:
    """The rule for this configuration at its modulus, with what its servers reported
    (patch status, cache-hit sizes)."""
    lengths = [int(r.target_len) for r in cd.records if r.target_len]
    by_residue: dict[int, set[int]] = {}
    for r in cd.records:
        if r.target_len and r.residue is not None:
            by_residue.setdefault(int(r.residue), set()).add(int(r.target_len))
    load = max((int((r.load or {}).get("n") or 0) for r in cd.records), default=0)
    preempted = sum(int((r.load or {}).get("preemptions") or 0) for r in cd.records)
    modes = {(r.load or {}).get("mode") for r in cd.records if (r.load or {}).get("n")}
    pred = predict(cd.config, cd.modulus, patch_status=cd.first("patch_status"),
                   patches=cd.first("patches"),
                   cached_tokens=(r.cached_tokens for r in cd.records),
                   longest=max(lengths) if lengths else None, load=load,
                   load_mode="cancel" if "cancel" in modes else "steady",
                   lengths=by_residue if load else None)
    if preempted and pred.armed and not pred.per_batch:
        # a preempted request is recomputed in other batches: the load arithmetic is off
        return Prediction(None, True, Phrase.of(
            f"cannot name a residue: {preempted} preemption(s) during the measured requests "
            "changed their batches (without them it ", pred.reason, ")"), pred.unit,
            budget=pred.budget)
    return pred


def judged_residues(cd: ConfigData) -> tuple[set[int], set[int]]:
    """(residues measured, residues broken). Broken: some phase broken or diverged.
    Measured clean: no phase broken and EVERY phase judged ok (a cold phase ``unjudged``
    because it is the reference, ``--reference cold``, counts as judged): a residue whose
    self-hit is invalid, crashed or unjudged was not measured where Bug B breaks, so it is
    never clean."""
    broken: set[int] = set()
    clean: set[int] = set()
    for res in cd.residues:
        verdicts = [(ph, c.verdict) for ph in cd.phases if (c := cd.cell(res, ph)) is not None]
        if any(v in BUG_VERDICTS for _, v in verdicts):
            broken.add(res)
        elif verdicts and any(v in CLEAN for _, v in verdicts) and all(
                v in CLEAN or (ph == PhaseName.COLD and v == UNJUDGED) for ph, v in verdicts):
            clean.add(res)
    return clean | broken, broken


def _not_lone_cells(cd: ConfigData, residues=None) -> int:
    """Cells ``not-lone`` (a match on a server the sweep does not own that was not shown
    to run alone: report/traffic.py), of ``residues`` when given."""
    return sum(1 for res in cd.residues if residues is None or res in residues
               for ph in cd.phases
               if (c := cd.cell(res, ph)) is not None and c.verdict == NOT_LONE)


def agreement(cd: ConfigData, pred: Prediction) -> str:
    """Does the sweep agree with the rule? Only judged answers count: a boot-fail, crash,
    timeout or invalid point says nothing about Bug B, and neither does an unjudged answer
    (no reference could judge it: the cold phase under ``--reference cold``) or a
    ``not-lone`` one (beside other requests: Bug B breaks a lone request). A residue is
    broken when some phase was broken or diverged, and measured clean only when every
    phase of it was judged ok (``judged_residues``). The ``not-lone`` cells left out are
    counted at the end."""
    said = _agreement(cd, pred)
    crowded = _not_lone_cells(cd)
    if crowded and judged_residues(cd)[0]:
        said += (f" ({crowded} `not-lone` cell{'s' if crowded != 1 else ''}, beside other "
                 "requests, not counted)")
    return said + history_rule(cd)


def history_rule(cd: ConfigData) -> str:
    """What the rule predicts under the configuration's ``--history`` (names/history.py);
    nothing for ``none``."""
    name = (cd.config or {}).get("history") or NONE
    if name == NONE or name not in HISTORY_NAMES:
        return ""
    return f"; under history {name} the rule predicts: {history_row(name).rule}"


def _agreement(cd: ConfigData, pred: Prediction) -> str:
    statuses = cd.statuses()
    covered, broken = judged_residues(cd)
    unmeasured = set(statuses) - covered
    if not covered:
        return _untested(cd, statuses)
    if pred.per_batch:
        return _per_batch_agreement(cd, pred.per_batch, covered, broken)
    if pred.measured_only:
        return f"broken at {residues_phrase(broken)}" if broken else "no break seen"
    if pred.residues is None:
        if broken:
            return f"broken at {residues_phrase(broken)}; the rule cannot be checked here"
        return "no break seen; the rule cannot be checked at this modulus"
    predicted = set(pred.residues)
    if not predicted:
        if not broken:
            return "**the sweep agrees** (no break)"
        if pred.watch and broken <= set(pred.watch):
            return (f"broken at {residues_phrase(broken)}, which the rule names to measure, "
                    "not to predict")
        return (f"**the sweep disagrees**: broken at {residues_phrase(broken)} although the "
                "rule predicts none (another bug, or a fix that did not apply)")
    sampled = predicted & covered
    if not sampled:
        return _not_sampled(cd, predicted, unmeasured)
    return _against(sampled, predicted, covered, broken)


def _untested(cd: ConfigData, statuses: dict) -> str:
    """Why no residue could test the rule."""
    if crowded := _not_lone_cells(cd):
        return (f"**no lone-request verdict**: {crowded} cell{'s' if crowded != 1 else ''}"
                " ran beside other requests or could not be shown to run alone on a "
                "server the sweep does not own (`not-lone`), so the rule is untested")
    if any(c is not None and c.verdict in CLEAN
           for res in cd.residues for c in (cd.cell(res, ph) for ph in cd.phases)):
        return ("**no residue judged on every phase** (an ok phase beside an invalid, "
                "unjudged or failed one is not clean), so the rule is untested")
    if any(s == UNJUDGED for s in statuses.values()):
        return ("**nothing judged** (every answer is unjudged: no reference could judge "
                "it), so the rule is untested")
    return "**nothing measured** (no point produced an answer), so the rule is untested"


def _not_sampled(cd: ConfigData, predicted: set[int], unmeasured: set[int]) -> str:
    """The rule's residues were not among those judged: why not."""
    partly = {res for res in predicted & unmeasured
              if any(c is not None and c.verdict in CLEAN
                     for c in (cd.cell(res, ph) for ph in cd.phases))}
    why = ("was swept but ran beside other requests (`not-lone`: not a lone-request "
           "verdict)" if _not_lone_cells(cd, predicted)
           else "was swept but not judged on every phase (an ok phase beside an unjudged "
           "or invalid one is not clean)" if partly
           else "was swept but produced no answer" if predicted & unmeasured
           else "was not sampled")
    return (f"**not tested**: {residues_phrase(predicted)} {why}, so the sweep "
            "can neither confirm nor refute the rule")


def _against(sampled: set[int], predicted: set[int], covered: set[int], broken: set[int]) -> str:
    """The rule's judged residues against the broken ones."""
    if broken == sampled:
        extra = "" if sampled == predicted else f" (of {residues_phrase(predicted)})"
        return f"**the sweep agrees**: broken exactly at {residues_phrase(broken)}{extra}"
    if sampled <= broken and 2 * len(broken - sampled) >= len(covered):
        # Bug B is one residue in a modulus; most residues bad is something else (a model
        # that gets the document wrong, a broken build), and says nothing about the rule.
        return (f"**inconclusive**: {len(broken)} of {len(covered)} measured residues are bad, "
                "not the rule's single-residue pattern, so the predicted residue being bad "
                "is no evidence for it (compare answers across phases: `--reference cold`)")
    if sampled <= broken:
        return (f"**the sweep agrees at {residues_phrase(sampled)}**, but is also broken at "
                f"{residues_phrase(broken - sampled)}")
    if not broken:
        return (f"**the sweep disagrees**: {residues_phrase(sampled)} is clean (a fix that "
                "applied unreported, or no cache hit on the measured phase: see cached_tokens)")
    return (f"**the sweep disagrees**: broken at {residues_phrase(broken)}, the rule "
            f"predicts {residues_phrase(predicted)}")


def _per_batch_agreement(cd: ConfigData, size: int, covered: set[int],
                         broken: set[int]) -> str:
    """Under ``--load-mode cancel`` the rule predicts per measured request (bugb's
    ``armed_batch``): a residue is predicted broken when some record of it shows its final
    chunk of ``size`` tokens in a shape-uniform batch. A residue whose records carry no
    ``load.beside`` cannot be checked, and the sentence says so."""
    shaped: set[int] = set()
    unread: set[int] = set()
    for r in cd.records:
        if r.residue is None or int(r.residue) not in covered:
            continue
        armed = armed_batch((r.load or {}).get("beside"), size)
        if armed is None:
            unread.add(int(r.residue))
        elif armed:
            shaped.add(int(r.residue))
    note = (f" ({residues_phrase(unread)}: no batch logged, not checked)" if unread else "")
    where = (f"where `load.beside` shows a {size}-token final chunk in a uniform batch: "
             + (residues_phrase(shaped) if shaped else "none"))
    checked_broken = broken - unread
    if checked_broken == shaped:
        verb = (f"broken exactly {where}" if shaped else f"no break, and no request ran "
                f"the shape ({where})")
        return f"**the sweep agrees**: {verb}{note}"
    seen = residues_phrase(checked_broken) if checked_broken else "no residue"
    return f"**the sweep disagrees**: broken at {seen}, {where}{note}"


# ----------------------------------------------------------------------------------------
# rendering
# ----------------------------------------------------------------------------------------
