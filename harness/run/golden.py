"""Golden answers (``--reference golden:RUN``): the correct answer per prompt from a
trusted reference run, looked up per data point (its residue, length and document, or a
prompt case's messages)."""
from __future__ import annotations

from pathlib import Path

from ..errors import CannotRun
from ..names.verdict import NOT_FAILED, UNJUDGED

UNPROVEN = frozenset({UNJUDGED})
from ..prompts import PlanError
from ..records.store import read_jsonl_records, resolve_results
from .plan import Point, SweepPlan
from ..records.recordkeys import latest_records
from ..records.same_compile import fingerprint_of

__all__ = ["load_golden", "golden_key", "golden_answer", "check_golden_covers"]


def load_golden(run_ref: str, out_dir: Path) -> dict[tuple, dict]:
    """The correct answer per prompt, from a reference run (typically a trusted
    configuration: no speculative decoding, no FULL graphs, or a known-good build):
    ``{(residue, templated length): {"text", "sha1", "tokens"}}``.

    A prompt is identified by (residue, templated length, document seed): the same context
    and seed give the same document and the same lengths whatever the configuration; a
    prompt case's prompt by the sha1 of its messages (``golden_key``). A record written
    before documents were an axis has ``document_seed`` None (its run's single seed);
    ``golden_answer`` falls back to it. Cells ``ok`` or ``unjudged`` (a run under
    ``--reference cold``) give answers; a run with any other cell is no reference
    (``CannotRun``, a usage error for ``--reference``). A prompt whose answers disagree in
    the reference run has no golden answer (it is left out)."""
    from ..judge.verdict import sha1
    seen: dict[tuple, dict[str, dict]] = {}
    bad: list[str] = []
    try:
        recs = read_jsonl_records(resolve_results(run_ref, out_dir))
    except ValueError as e:   # a record the model refuses (an unknown verdict or phase)
        raise CannotRun(f"golden run {run_ref}: {e}") from None
    for r in latest_records(recs)[0]:
        if r.verdict not in NOT_FAILED:
            bad.append(f"residue {r.residue} {r.phase} {r.verdict}")
            continue
        text = r.answer or ""
        key = (("prompt", r.prompt_sha1) if r.prompt_sha1
               else (r.residue, r.target_len, r.document_seed))
        seen.setdefault(key, {}).setdefault(sha1(text), {
            "text": text, "sha1": sha1(text), "tokens": r.token_logprobs,
            # an unjudged answer may be a broken one: its bytes hold only for its compile
            "proven": r.verdict not in UNPROVEN, "fingerprint": fingerprint_of(r)})
    if bad:
        raise CannotRun(f"golden run {run_ref} has {len(bad)} bad cell(s) ({bad[0]}"
                        f"{', ...' if len(bad) > 1 else ''}): a reference must be all ok "
                        "or unjudged")
    golden = {k: next(iter(v.values())) for k, v in seen.items() if len(v) == 1}
    if not golden:
        raise CannotRun(f"golden run {run_ref}: no ok or unjudged records to take answers from")
    return golden


def golden_key(point: Point) -> tuple:
    """How a golden answer for ``point`` is looked up (see ``load_golden``)."""
    if point.plan.prompt_sha1:
        return ("prompt", point.plan.prompt_sha1)
    return (point.residue, point.plan.target_len, point.document_seed)


def golden_answer(golden: dict[tuple, dict], point: Point,
                  fingerprint: str | None = None) -> dict | None:
    """The golden answer of ``point``'s prompt on its document (or, from a reference run
    that predates document seeds, of the same residue and length). An answer the golden run
    did not judge (``--reference cold``'s cold answers: a cold break is among them) is
    compared only by a server of the same compile ``fingerprint`` (issue 48: a broken
    answer's bytes hold for servers sharing a compile); elsewhere there is none (None)."""
    key = golden_key(point)
    gold = golden.get(key) if key in golden or key[0] == "prompt" else golden.get(key[:2] + (None,))
    if gold and not gold.get("proven", True) and (
            gold.get("fingerprint") is None or gold.get("fingerprint") != fingerprint):
        return None
    return gold


def _shares_prompt(golden: dict[tuple, dict], point: Point) -> bool:
    """The golden run answered ``point``'s prompt (whether a server may use the answer is
    ``golden_answer``'s: a compile's)."""
    key = golden_key(point)
    return key in golden or (key[0] != "prompt" and key[:2] + (None,) in golden)


def check_golden_covers(plan: SweepPlan, golden: dict[tuple, dict], run_ref: str) -> None:
    """A prompt case without ``expected`` is judged by the golden run alone: every one of
    its prompts must have a golden answer, or the sweep is a usage error now (there is no
    passage to fall back on). A golden run that shares no prompt with this plan (another
    --context, --seed or model) is one too: every point would fall back on the passage,
    judged as if no golden run were named (issue 50)."""
    for p in plan.points:
        if p.case is not None and p.plan.expected is None and golden_key(p) not in golden:
            raise PlanError(f"--reference golden:{run_ref}: no ok answer for case {p.case!r} "
                            f"residue {p.residue} ({p.plan.target_len} tokens) in that run; "
                            "sweep the same cases there first, or give \"expected\"")
    if plan.points and not any(_shares_prompt(golden, p) for p in plan.points):
        raise PlanError(f"--reference golden:{run_ref}: that run shares no prompt with this "
                        "one (answers are looked up by residue, templated length and "
                        "document); sweep with its --context, --seed and --model, or give "
                        "another --reference")
