"""``--isolation restore`` in the report's provenance: by which means the reused servers
were returned to their just-booted state, how many points that proved, and what it cost
per point (from the records' ``restore`` field, docs/records.md)."""
from __future__ import annotations

import statistics
from collections.abc import Iterable

from ..text.ghmarkdown import escape_text
from ..records.recordkeys import point_key
from ..records.phase_record import PhaseRecord
from ..records.same_compile import compile_phrase
from ..names.isolation import IsolationName

__all__ = ["restore_summary", "poison_summary"]


def restore_summary(records: Iterable[PhaseRecord]) -> str:
    """``sleep-level-1+wake+reset: 127 points restored, each proven (median 0.02 s per
    point, 0.01–0.05 s); 1 on a just-booted server``; "" when no record was restored."""
    by_point: dict[tuple, dict] = {}
    for r in records:
        if r.isolation == IsolationName.RESTORE and isinstance(r.restore, dict):
            by_point.setdefault(point_key(r), r.restore)
    if not by_point:
        return ""
    done = [p for p in by_point.values() if p.get("means") not in ("boot", "failed")]
    failed = [p for p in by_point.values() if p.get("means") == "failed"]
    booted = sum(1 for p in by_point.values() if p.get("means") == "boot")
    replaced = [p for p in by_point.values() if p.get("replaced")]
    means = sorted({str(p.get("means")) for p in done}) or ["none"]
    parts = []
    if done:
        secs = [float(p.get("s") or 0.0) for p in done]
        parts.append(f"{len(done)} point{'s' if len(done) != 1 else ''} restored, "
                     f"{_proof(done)} (median {statistics.median(secs):.3g} s per point, "
                     f"{min(secs):.3g}–{max(secs):.3g} s)")
        what = restored_phrase(done)
        if what:
            parts.append(what)
    if failed:
        first = escape_text(str(failed[0].get("error")), limit=160)
        parts.append(f"{len(failed)} restore{'s' if len(failed) != 1 else ''} failed (those "
                     f"points are invalid; first: {first})")
    if replaced:
        first = escape_text(str(replaced[0]["replaced"]), limit=160)
        parts.append(f"{len(replaced)} restore{'s' if len(replaced) != 1 else ''} failed (the "
                     f"server was replaced, the point ran on the new one; first: {first})")
    if booted:
        parts.append(f"{booted} on a just-booted server")
    return f"{escape_text(', '.join(means))}: " + "; ".join(parts)


def restored_phrase(done: list[dict]) -> str:
    """What the fills restored (``restore.restored``, issue 51): ``dirty (the blocks the
    point was given) on 30 points, median 12 blocks, 1.5 MiB; every storage on 2 (why);
    whole-pool audits 2/2 proven``; "" for records before the field."""
    rows = [p["restored"] for p in done if isinstance(p.get("restored"), dict)]
    if not rows:
        return ""
    dirty = [r for r in rows if r.get("means") == "dirty"]
    whole = [r for r in rows if r.get("means") != "dirty"]
    out = []
    if dirty:
        blocks = [r["blocks"] for r in dirty if isinstance(r.get("blocks"), int)]
        mib = [r["bytes"] / 2**20 for r in dirty if isinstance(r.get("bytes"), (int, float))]
        med = (f", median {statistics.median(blocks):g} blocks" if blocks else "") + (
            f", {statistics.median(mib):.3g} MiB" if mib else "")
        out.append(f"dirty (the blocks the point was given) on {len(dirty)} "
                   f"point{'s' if len(dirty) != 1 else ''}{med}")
    if whole:
        whys = sorted({str(r.get("why")) for r in whole if r.get("why")})
        out.append(f"every storage on {len(whole)}" + (f" ({escape_text('; '.join(whys), limit=160)})"
                                                      if whys else ""))
    audits = [r["audit"] for r in rows if r.get("audit") is not None]
    if audits:
        out.append(f"whole-pool audits {sum(bool(a) for a in audits)}/{len(audits)} proven")
    return "; ".join(out)


# restore.checks (harness/serve/restore.py), as the row names them
CHECK_LABELS = {"is_sleeping": "asleep", "sleep_gauge": "sleep gauge",
                "discard": "KV discarded", "is_awake": "awake", "wake_gauge": "wake gauge",
                "pool_empty": "pool empty", "fill": "fill"}


def _proof(done: list[dict]) -> str:
    """What proved the restored points: ``each proven: asleep, ..., pool empty`` only when
    every check of every point ran; a check that could not run is named with why and on
    how many points. Records before ``restore.checks`` read as they always did."""
    unproven = sum(1 for p in done if p.get("proven") is False)   # a fill (--poison)
    infra = f"{unproven} not proven (those points are infra)" if unproven else ""
    checked = [p["checks"] for p in done if isinstance(p.get("checks"), dict)]
    if not checked:
        return infra or "each proven"
    names = sorted({n for checks in checked for n in checks}, key=_rank)
    gaps = _not_run(checked)
    skipped = {n for ns, _ in gaps.values() for n in ns}
    proven = ", ".join(CHECK_LABELS.get(n, n) for n in names if n not in skipped)
    if not gaps:
        return infra or f"each proven: {proven}"
    said = [f"{', '.join(CHECK_LABELS.get(n, n) for n in sorted(ns, key=_rank))} not run "
            f"on {points} point{'s' if points != 1 else ''} ({escape_text(why, limit=160)})"
            for why, (ns, points) in sorted(gaps.items(),
                                            key=lambda kv: min(map(_rank, kv[1][0])))]
    return "; ".join(x for x in (infra, f"proven: {proven}" if proven else "none proven",
                                 *said) if x)


def _rank(name: str) -> int:
    """A check's place in the restore's own order (a record's keys may come back sorted)."""
    order = list(CHECK_LABELS)
    return order.index(name) if name in order else len(order)


def _not_run(checked: list[dict]) -> dict[str, tuple[set[str], int]]:
    """why -> (the checks that could not run for that reason, on how many points)."""
    out: dict[str, tuple[set[str], int]] = {}
    for checks in checked:
        seen: set[str] = set()
        for name, c in checks.items():
            if isinstance(c, dict) and c.get("not_run"):
                why = str(c["not_run"])
                names, points = out.get(why, (set(), 0))
                out[why] = (names | {name}, points + (why not in seen))
                seen.add(why)
    return out


def poison_summary(records: Iterable[PhaseRecord]) -> str:
    """``--poison`` in the provenance: ``on: state,kv,builders filled with pattern A after
    boot (12 servers) and at 40 restores; every fill proven``, ``not supported by this
    engine`` (``--poison auto``), ``off (--poison off)``; "" for
    records written before the field (their reports stay as they were)."""
    fills: dict[tuple, dict] = {}
    on: list[PhaseRecord] = []
    offs: list[str] = []
    what: set[str] = set()
    kinds: set[str] = set()
    for r in records:
        p = r.poison
        if not isinstance(p, dict):
            continue
        if p.get("mode") != "on":
            offs.append(str(p.get("why") or "off"))
            continue
        on.append(r)
        what.add(f"{p.get('regions')} filled with pattern {p.get('pattern')}")
        kernels = p.get("kernels")
        if isinstance(kernels, dict):   # vLLM: kernel choices fixed, or why not
            kinds.add(_kernels_phrase(kernels))
        for f in p.get("fills") or ():
            # a server's boot fill by its log; a restore fill by its point
            boot = r.boot
            key = (f.get("at"), (boot.log if boot else None) if f.get("at") == "boot"
                   else point_key(r))
            fills.setdefault(key, f)
    parts = []
    if what:
        boots = sum(1 for (at, _) in fills if at == "boot")
        restores = len(fills) - boots
        bad = sum(1 for f in fills.values() if not f.get("ok"))
        secs = sorted(float(f.get("s") or 0.0) for f in fills.values() if f.get("ok"))
        cost = f", median {statistics.median(secs):.3g} s per fill" if secs else ""
        parts.append(f"on: {', '.join(sorted(what))} after boot ({boots} server"
                     f"{'s' if boots != 1 else ''})" + (f" and at {restores} restore"
                                                        f"{'s' if restores != 1 else ''}" if restores else "")
                     + (f"; {bad} fill{'s' if bad != 1 else ''} not proven (those points are infra)"
                        if bad else "; every fill proven") + cost
                     + "".join(f"; {k}" for k in sorted(kinds)) + "; " + compile_phrase(on))
    for why in sorted(set(offs)):
        parts.append(why if why != "off" else "off (--poison off)")
    return escape_text("; ".join(parts))


def _kernels_phrase(kernels: dict) -> str:
    """The poison row's words for a record's ``poison.kernels``."""
    if not kernels.get("fixed"):
        return f"kernel choices not fixed: {kernels.get('why')}"
    inductor = kernels.get("inductor")
    words = ", ".join(sorted(kernels.get("env") or ()))
    # what the bytes hold for is the compile's fingerprint (compile_phrase): two H100
    # machines disagreed at ngram k >= 3 with these switches (issue 48)
    if inductor:
        return f"kernel choices fixed ({words}; Inductor {', '.join(f'{k}={v}' for k, v in sorted(inductor.items()))})"
    return f"kernel choices fixed ({words})"
