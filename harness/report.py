"""Markdown reports of residue sweeps: thread-style tables, safe to paste into GitHub.

Input: phase records (docs/records.md) from one or more results files, and optionally
their run manifests. Output: one GitHub-flavoured markdown document with

- the residue × configuration table (phases as columns for one configuration, one column
  per configuration × phase when several were swept); a clean cell is the verbatim
  ``n/N``, a bad cell is bold and says what happened in the thread's words; long runs of
  clean rows fold into one line unless ``full=True``;
- a footnote table with the 12-hex sha1 (and excerpt) of every non-ok cell;
- a summary per configuration: coverage of the modulus, clean / broken residues, what the
  Bug B rule predicts and whether the sweep agrees, the miss probability of a partial
  sweep, the cache-hit granularity when the modulus cannot resolve it, the effective
  configuration and the command lines that rerun its cells;
- a ladder view when the configurations differ in one or two dimensions only;
- provenance (runs, engine, versions, patch set, slots, nodes, isolation, dates).

Everything a server sent is untrusted and goes through :mod:`harness._markdown`.
"""
from __future__ import annotations

import math
import pathlib
import re
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any, Iterable

from ._markdown import bold, cap, code, escape_text, fence, table

PHASE_ORDER = ("cold", "warm", "self-hit")
# Worst first: a point's status is the worst verdict of its phases.
SEVERITY = ("infra", "boot-fail", "crash", "timeout", "broken", "diverged", "invalid", "ok")
BUG_VERDICTS = frozenset({"broken", "diverged"})
REPEAT_MIN = 3              # the most frequent 40-char block this often = degenerate repetition
FOLD_ABOVE = 12             # tables with more rows than this fold their clean rows
EXCERPT_CHARS = 80          # answer excerpt in the footnotes
REASON_CHARS = 90           # reason inside a bad cell (boot-fail / invalid)
DEFAULT_MODULUS = 128
# Identity fields of a configuration in the order a reader wants them; anything else a
# config dict carries is shown after these.
CONFIG_FIELDS = ("engine", "model", "geometry", "spec", "method", "draft_tokens", "ctx",
                 "cudagraph_mode", "prefix_caching", "block_size", "prefix_match_unit",
                 "max_model_len", "kv_cache_memory_bytes", "patches")
NOT_IDENTITY = frozenset({"notes", "overrides"})
# What a server reports about itself that changes from one server to the next: never a
# dimension of a configuration, never worth printing.
VOLATILE = frozenset({"port", "host", "api_key_required"})
FULL_GRAPH_MODES = frozenset({"FULL", "FULL_AND_PIECEWISE", "FULL_DECODE_ONLY"})
PREFILL_FIX = "prefill-discriminator"
SHORT_NAMES = {"block_size": "block", "prefix_match_unit": "unit", "draft_tokens": "k",
               "spec": "SPEC", "ctx": "CTX", "kv_cache_memory_bytes": "KV_MEM",
               "cudagraph_mode": "cudagraph", "prefix_caching": "prefix caching"}


# ----------------------------------------------------------------------------------------
# small helpers
# ----------------------------------------------------------------------------------------
def sha12(record: dict) -> str:
    return (record.get("sha1") or "")[:12] or "–"


def fmt_ranges(values: Iterable[int]) -> str:
    """``[0,1,2,3,5,6,7]`` -> ``0–3, 5–7`` (en dash, as in the thread)."""
    vals = sorted(set(int(v) for v in values))
    out, i = [], 0
    while i < len(vals):
        j = i
        while j + 1 < len(vals) and vals[j + 1] == vals[j] + 1:
            j += 1
        if j == i:
            out.append(str(vals[i]))
        elif j == i + 1:
            out.extend([str(vals[i]), str(vals[j])])
        else:
            out.append(f"{vals[i]}–{vals[j]}")
        i = j + 1
    return ", ".join(out)


def residues_phrase(values: Iterable[int]) -> str:
    vals = sorted(set(values))
    return ("residue " if len(vals) == 1 else "residues ") + fmt_ranges(vals)


def fmt_percent(p: float) -> str:
    pct = 100.0 * p
    if pct >= 10 or pct == 0:
        return f"{pct:.0f}%"
    if pct >= 1:
        return f"{pct:.1f}%".replace(".0%", "%")
    return f"{pct:.2f}%"


def miss_probability(covered: int, modulus: int) -> float:
    """Chance that a sweep of ``covered`` distinct residues misses one broken residue
    placed anywhere in ``modulus`` (uniformly): ``1 - covered / modulus``."""
    if modulus <= 0:
        return 0.0
    return max(0.0, 1.0 - covered / modulus)


def miss_sentence(covered: int, modulus: int) -> str:
    """The thread's sentence: ``5 of 128 residues sampled: a single broken residue would be
    missed 96% of the time.``"""
    p = miss_probability(covered, modulus)
    return (f"{covered} of {modulus} residues sampled: a single broken residue would be "
            f"missed {fmt_percent(p)} of the time.")


def phase_key(phase: str) -> tuple:
    return (PHASE_ORDER.index(phase) if phase in PHASE_ORDER else len(PHASE_ORDER), phase)


def worst(verdicts: Iterable[str]) -> str:
    vs = list(verdicts)
    if not vs:
        return "ok"
    return min(vs, key=lambda v: SEVERITY.index(v) if v in SEVERITY else 0)


def record_identity(r: dict) -> dict:
    """The fields that define a record's configuration (see ConfigData.identity)."""
    config = r.get("config") or {}
    requested = r.get("requested_config") or {}
    keys = [k for k in requested if k not in NOT_IDENTITY] or [
        k for k in CONFIG_FIELDS if k in config]
    return {k: config.get(k, requested.get(k)) for k in keys}


def _fmt_value(name: str, value: Any) -> str:
    if value is None:
        return "none" if name == "prefix_match_unit" else "–"
    if isinstance(value, bool):
        return "on" if value else "off"
    if name == "kv_cache_memory_bytes" and isinstance(value, (int, float)):
        return f"{value / 1024 ** 3:.2f} GiB".replace(".00 GiB", " GiB")
    return str(value)


def describe_dim(name: str, value: Any) -> str:
    """One configuration dimension as a reader says it: ``block=128``, ``unit=none``,
    ``FULL_AND_PIECEWISE``."""
    if name == "cudagraph_mode":
        return str(value)
    if name == "prefix_caching":
        return "prefix caching " + _fmt_value(name, value)
    if name == "geometry":
        return str(value)
    return f"{SHORT_NAMES.get(name, name)}={_fmt_value(name, value)}"


def config_fields(configs: Iterable[dict]) -> list[str]:
    seen: list[str] = [f for f in CONFIG_FIELDS]
    for c in configs:
        for k in c:
            if k not in seen and k not in NOT_IDENTITY:
                seen.append(k)
    return seen


def varying_fields(configs: list[dict]) -> list[str]:
    """Identity fields whose value is not the same in every configuration."""
    if len(configs) < 2:
        return []
    names = config_fields(configs)
    out = []
    for n in names:
        values = {repr(c.get(n)) for c in configs}
        if len(values) > 1:
            out.append(n)
    # method follows spec, so a spec change is one dimension, not two
    if "spec" in out and "method" in out:
        out.remove("method")
    return out


# ----------------------------------------------------------------------------------------
# the data: configurations, points, cells
# ----------------------------------------------------------------------------------------
@dataclass
class ConfigData:
    config_id: str
    label: str
    config: dict
    requested: dict
    records: list[dict] = field(default_factory=list)

    @property
    def modulus(self) -> int:
        mods = [r.get("modulus") for r in self.records if r.get("modulus")]
        return int(Counter(mods).most_common(1)[0][0]) if mods else DEFAULT_MODULUS

    @property
    def residues(self) -> list[int]:
        return sorted({int(r["residue"]) for r in self.records if r.get("residue") is not None})

    @property
    def phases(self) -> list[str]:
        return sorted({r.get("phase") or "?" for r in self.records}, key=phase_key)

    @property
    def identity(self) -> dict:
        """The fields that define the configuration: those the sweep asked for
        (``requested_config``), else the known ServingConfig fields; not the extras the
        server reported (ports, pool sizes), which go in the effective configuration."""
        keys = [k for k in (self.requested or {}) if k not in NOT_IDENTITY]
        if not keys:
            keys = [k for k in CONFIG_FIELDS if k in self.config]
        return {k: self.config.get(k, self.requested.get(k)) for k in keys}

    def cell(self, residue: int, phase: str) -> dict | None:
        return self._index().get((residue, phase))

    def _index(self) -> dict:
        idx = getattr(self, "_idx", None)
        if idx is None:
            idx = {(int(r["residue"]), r.get("phase") or "?"): r for r in self.records}
            self._idx = idx
        return idx

    def point_status(self, residue: int) -> str:
        return self.statuses().get(residue, "ok")

    def statuses(self) -> dict[int, str]:
        """Each residue's status: the worst verdict of its phases."""
        st = getattr(self, "_statuses", None)
        if st is None:
            by: dict[int, list[str]] = defaultdict(list)
            for (res, _), r in self._index().items():
                by[res].append(r.get("verdict") or "invalid")
            st = self._statuses = {res: worst(v) for res, v in sorted(by.items())}
        return st

    def first(self, key: str, default: Any = None) -> Any:
        for r in self.records:
            if r.get(key) not in (None, "", [], {}):
                return r[key]
        return default

    def distinct(self, key: str) -> list:
        out = []
        for r in self.records:
            v = r.get(key)
            if v not in (None, "") and v not in out:
                out.append(v)
        return out


def latest_records(records: Iterable[dict]) -> tuple[list[dict], int]:
    """One record per (configuration, residue, phase): the latest by ``started_at`` (so a
    report over several runs shows the newest measurement). Returns (records, superseded)."""
    best: dict[tuple, dict] = {}
    n = 0
    for r in records:
        n += 1
        key = (r.get("config_id") or r.get("config_label"), r.get("residue"), r.get("phase"))
        old = best.get(key)
        if old is None or (r.get("started_at") or "") >= (old.get("started_at") or ""):
            best[key] = r
    return list(best.values()), n - len(best)


def group_configs(records: Iterable[dict]) -> list[ConfigData]:
    """Records grouped by configuration, in the order configurations first appear."""
    out: dict[str, ConfigData] = {}
    for r in records:
        cid = r.get("config_id") or r.get("config_label") or "?"
        cd = out.get(cid)
        if cd is None:
            cd = out[cid] = ConfigData(
                config_id=cid, label=r.get("config_label") or cid,
                config=dict(r.get("config") or {}),
                requested=dict(r.get("requested_config") or {}))
        cd.records.append(r)
    return list(out.values())


def _is_repetition(r: dict) -> bool:
    return (r.get("repeats") or 0) >= REPEAT_MIN


# A server log line that names the failure: "ValueError: ...", "AssertionError", vLLM's
# boot-capacity message. The last such line of the excerpt is the gist.
_GIST = re.compile(r"\b[A-Za-z_.]*(Error|Exception|Interrupt)\b|\bassert(ion)?\b|KV cache is "
                   r"needed|larger than the available|out of memory|Killed|Traceback", re.I)


def failure_gist(r: dict) -> str:
    """One line saying why a crash / boot-fail / timeout happened: the last log line that
    names an error (``ModuleNotFoundError: No module named 'x'``), else the reason."""
    lines = [str(x).strip() for x in (r.get("log_excerpt") or []) if str(x).strip()]
    named = [ln for ln in lines if _GIST.search(ln) and not ln.startswith("Traceback")]
    if named:
        return named[-1]
    return _reason_short(r)


def _reason_short(r: dict) -> str:
    reason = (r.get("reason") or "").strip()
    if not reason and r.get("log_excerpt"):
        reason = str(r["log_excerpt"][-1]).strip()
    return reason or "no reason recorded"


def cell_phrase(r: dict | None) -> str:
    """What a cell says, in the thread's words (markdown, not yet bold)."""
    if r is None:
        return "not run"
    v = r.get("verdict") or "invalid"
    n, total = r.get("verbatim_n"), r.get("verbatim_total")
    nN = f"{n}/{total}" if n is not None and total is not None else "?"
    if v == "ok":
        return nN
    if v in ("crash", "timeout"):
        return v
    if v == "boot-fail":
        return f"{v}: " + escape_text(failure_gist(r), limit=REASON_CHARS)
    if v in ("invalid", "infra"):
        return f"{v}: " + escape_text(_reason_short(r), limit=REASON_CHARS)
    answer = r.get("answer") or ""
    if answer == "":
        parts = ["empty"]
    elif len(answer) == 1:
        parts = ["1 char"]
    elif _is_repetition(r):
        parts = [nN, f"repetition ×{r.get('repeats')}"]
    else:
        parts = [nN]
    if v == "diverged":
        parts.append("diverged")
    elif v not in BUG_VERDICTS:
        parts.append(escape_text(v))
    if r.get("finish_reason"):
        parts.append(code(r["finish_reason"]))
    tps = r.get("tok_per_step")
    if tps is not None:
        parts.append(f"{float(tps):.2f} tok/step")
    return ", ".join(parts)


def cell_markdown(r: dict | None, mark: str = "") -> str:
    text = cell_phrase(r)
    if r is not None and r.get("verdict") != "ok":
        text = bold(text)
        if mark:
            text += f" {mark}"
    return text


# ----------------------------------------------------------------------------------------
# Bug B: what the rule predicts for a configuration
# ----------------------------------------------------------------------------------------
def hit_granularity(cd: ConfigData) -> tuple[int | None, int]:
    """gcd of the positive ``cached_tokens`` seen, and how many distinct values it is from."""
    vals = sorted({int(r["cached_tokens"]) for r in cd.records
                   if isinstance(r.get("cached_tokens"), int) and r["cached_tokens"] > 0})
    if not vals:
        return None, 0
    g = 0
    for v in vals:
        g = math.gcd(g, v)
    return g, len(vals)


def _prefill_fix_applied(cd: ConfigData) -> tuple[bool, str]:
    status = cd.first("patch_status")
    if isinstance(status, dict) and PREFILL_FIX in status:
        s = str(status[PREFILL_FIX])
        return s == "applied", f"{PREFILL_FIX}: {s}"
    patches = str(cd.config.get("patches") or cd.first("patches") or "")
    asked = patches == "all" or PREFILL_FIX in patches.split(",")
    return asked, f"patches={patches or '?'} (engine reported no patch status)"


@dataclass
class Prediction:
    residues: list[int] | None   # None: the rule cannot name residues at this modulus
    armed: bool                  # a Bug B break is expected at all
    why: str                     # markdown
    unit: int | None = None      # the hit unit the prediction is made with, if known


def predict_bug_b(cd: ConfigData) -> Prediction:
    """DESIGN §1: breaks iff templated length ≡ k+1 (mod hit unit), given speculative
    decoding, prefix caching, a FULL graph for the verify step and no prefill fix."""
    c = cd.config
    m = cd.modulus
    method = c.get("method", c.get("spec"))
    k = int(c.get("draft_tokens") or 0) if method and method != "none" else 0
    if not k:
        return Prediction([], False, "predicts no break: no speculative decoding, so no "
                          "`1 + k` verify shape to mistake a prefill tail for")
    if c.get("prefix_caching") is False:
        return Prediction([], False, "predicts no break: prefix caching is off, so no cache "
                          "hit cuts the prompt tail")
    mode = c.get("cudagraph_mode")
    if mode and mode not in FULL_GRAPH_MODES:
        return Prediction([], False, f"predicts no break: {code(mode)} captures no FULL "
                          "graph for the verify step")
    fixed, how = _prefill_fix_applied(cd)
    if fixed:
        return Prediction([], False, "predicts no break: the prefill-discriminator fix is "
                          f"on ({escape_text(how)})")
    unit = c.get("prefix_match_unit")
    source = "match unit"
    if not unit:
        g, nvals = hit_granularity(cd)
        if c.get("effective_hash_unit"):
            # what the server says its cache hits align to (lab: the state page on hybrid)
            unit, source = int(c["effective_hash_unit"]), "hash unit the server reported"
        elif c.get("geometry") == "dense" and c.get("block_size"):
            # a dense model hits in whole KV blocks
            unit, source = int(c["block_size"]), "block size (dense, no match unit)"
        elif g and nvals >= 2:
            unit, source = g, "measured hit granularity (gcd of cached_tokens)"
        else:
            return Prediction(None, True, f"cannot name a residue: k={k}, but no "
                              "`--prefix-match-unit`, so hits align to the KV page (on a "
                              "hybrid model the larger state page, 2048 tokens in the "
                              f"thread), which a mod-{m} sweep cannot resolve")
    unit = int(unit)
    armed = (k + 1) % unit
    if unit == m:
        res = [armed]
    elif m % unit == 0:
        res = [r for r in range(m) if r % unit == armed]
    else:
        return Prediction(None, True, f"cannot name a residue: k={k}, {source} {unit} arms "
                          f"lengths ≡ {armed} (mod {unit}), which a mod-{m} sweep cannot "
                          "resolve", unit)
    return Prediction(res, True, f"predicts {residues_phrase(res)} (k + 1 = {k + 1}, mod "
                      f"{source} {unit}; {code(mode or '?')}, prefill fix off)", unit)


def agreement(cd: ConfigData, pred: Prediction) -> str:
    """Does the sweep agree with the rule? Only points that produced answers count: a
    boot-fail, crash, timeout or invalid point says nothing about Bug B."""
    statuses = cd.statuses()
    covered = {r for r, s in statuses.items() if s == "ok" or s in BUG_VERDICTS}
    unmeasured = set(statuses) - covered
    broken = {r for r, s in statuses.items() if s in BUG_VERDICTS}
    if not covered:
        return "**nothing measured** (no point produced an answer), so the rule is untested"
    if pred.residues is None:
        if broken:
            return f"broken at {residues_phrase(broken)}; the rule cannot be checked here"
        return "no break seen; the rule cannot be checked at this modulus"
    predicted = set(pred.residues)
    if not predicted:
        if not broken:
            return "**the sweep agrees** (no break)"
        return (f"**the sweep disagrees**: broken at {residues_phrase(broken)} although the "
                "rule predicts none (another bug, or a fix that did not apply)")
    sampled = predicted & covered
    if not sampled:
        why = ("was swept but produced no answer" if predicted & unmeasured
               else "was not sampled")
        return (f"**not tested**: {residues_phrase(predicted)} {why}, so the sweep "
                "can neither confirm nor refute the rule")
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


# ----------------------------------------------------------------------------------------
# rendering
# ----------------------------------------------------------------------------------------
class _Footnotes:
    """Numbered marks (†1, †2, …) for non-ok cells and the sha1 table they point to.

    Identical bad cells of one configuration (same verdict, sha1, wording and reason: a
    boot failure on both phases, one collapse at several residues) share one mark, and the
    footnote lists the residues and phases it stands for."""

    def __init__(self) -> None:
        self.items: list[dict] = []
        self._by_key: dict[tuple, dict] = {}

    def mark(self, cd: ConfigData, r: dict | None) -> str:
        if r is None or r.get("verdict") == "ok":
            return ""
        key = (cd.config_id, r.get("verdict"), r.get("sha1"), cell_phrase(r),
               failure_gist(r))
        item = self._by_key.get(key)
        if item is None:
            item = {"mark": f"†{len(self.items) + 1}", "cd": cd, "r": r,
                    "residues": [], "phases": []}
            self._by_key[key] = item
            self.items.append(item)
        if r.get("residue") not in item["residues"]:
            item["residues"].append(r.get("residue"))
        if r.get("phase") not in item["phases"]:
            item["phases"].append(r.get("phase"))
        return item["mark"]

    def render(self, multi: bool, short: dict[str, str]) -> str:
        if not self.items:
            return ""
        header = ["†"] + (["configuration"] if multi else []) + [
            "residue", "phase", "verdict", "sha1", "finish", "tok/step", "cached / tail",
            "reason", "answer (excerpt)"]
        rows = []
        for item in self.items:
            m, cd, r = item["mark"], item["cd"], item["r"]
            ans = r.get("answer") or ""
            excerpt = "`content: null`" if r.get("content_was_null") and not ans else (
                "*(empty)*" if not ans else escape_text(ans, limit=EXCERPT_CHARS))
            tps = r.get("tok_per_step")
            cached = r.get("cached_tokens")
            tail = r.get("computed_tail")
            reason = escape_text(_reason_short(r), limit=120)
            if r.get("log_excerpt") and r.get("verdict") in ("crash", "boot-fail", "timeout"):
                reason += " — log: " + escape_text(failure_gist(r), limit=160)
            several = len(item["residues"]) > 1 or len(item["phases"]) > 1
            rows.append([m] + ([short.get(cd.config_id, code(cd.label))] if multi else []) + [
                fmt_ranges(item["residues"]),
                escape_text(", ".join(sorted(item["phases"], key=phase_key))),
                escape_text(r.get("verdict")), code(sha12(r)) if r.get("sha1") else "–",
                code(r["finish_reason"]) if r.get("finish_reason") else "–",
                f"{float(tps):.2f}" if tps is not None else "–",
                (f"{cached if cached is not None else '–'} / {tail if tail is not None else '–'}"
                 + (f" (residue {r.get('residue')} {escape_text(r.get('phase'))})"
                    if several and cached is not None else "")),
                reason, excerpt])
        return ("Non-ok cells (sha1 is the first 12 hex of the answer's sha1; identical cells "
                "share a mark):\n\n" + table(header, rows))


def _row_label(residue: int, bad: bool) -> str:
    return bold(f"residue {residue}") if bad else f"residue {residue}"


def _fold_rows(rows: list[tuple[int, list[str], bool]], full: bool) -> list[list[str]]:
    """rows: (residue, cells, all_ok). Rows with identical cells fold into one line placed
    where the first of them was: clean rows (``residues 0–3, 5–127 | 794/794``) and
    identical bad rows alike (a boot failure at every residue is one line, bold)."""
    if full or len(rows) <= FOLD_ABOVE:
        return [[_row_label(res, not ok)] + cells for res, cells, ok in rows]
    clean_groups = {tuple(cells) for _, cells, ok in rows if ok}
    if len(clean_groups) > 4:
        # Too varied to fold by value: fold all clean rows, say that N varies.
        ncol = len(rows[0][1])
        varied = ["clean (n/N varies)"] * ncol
        rows = [(res, varied if ok else cells, ok) for res, cells, ok in rows]
    groups: dict[tuple, list[int]] = defaultdict(list)
    ok_of: dict[tuple, bool] = {}
    for res, cells, ok in rows:
        groups[tuple(cells)].append(res)
        ok_of[tuple(cells)] = ok
    first_of = {min(v): k for k, v in groups.items()}
    out = []
    for res, _, _ in rows:
        if res in first_of:
            key = first_of[res]
            label = residues_phrase(groups[key])
            out.append([label if ok_of[key] else bold(label)] + list(key))
    return out


def short_labels(configs: list[ConfigData]) -> tuple[dict[str, str], str]:
    """Column headers that name only what differs between configurations, and the common
    part (the table's corner), e.g. ``FULL_AND_PIECEWISE`` / ``SPEC=mtp CTX=huge k=3``."""
    dicts = [c.identity for c in configs]
    vary = varying_fields(dicts) if all(dicts) else []
    if len(configs) < 2 or not vary:
        common = configs[0].label if len(configs) == 1 else "configuration"
        return {c.config_id: code(c.label) for c in configs}, code(common)
    short = {}
    for c in configs:
        short[c.config_id] = " ".join(describe_dim(n, c.identity.get(n)) for n in vary)
    base = configs[0].identity
    common_parts = []
    for n in ("spec", "ctx", "draft_tokens", "cudagraph_mode", "block_size",
              "prefix_match_unit", "patches", "geometry"):
        if n in vary or n not in base:
            continue
        if n == "draft_tokens" and not base.get("method"):
            continue
        if n == "geometry" and not base.get(n):
            continue
        common_parts.append(describe_dim(n, base.get(n)))
    return ({k: escape_text(v) for k, v in short.items()},
            code(" ".join(common_parts)) if common_parts else "configuration")


def render_results_table(configs: list[ConfigData], notes: _Footnotes, *, full: bool,
                         short: dict[str, str], corner: str) -> str:
    phases = sorted({p for c in configs for p in c.phases}, key=phase_key)
    residues = sorted({r for c in configs for r in c.residues})
    if len(configs) == 1:
        cd = configs[0]
        header = [corner] + [escape_text(p) for p in phases]
        cols = [(cd, p) for p in phases]
    else:
        header = [corner] + [f"{short[c.config_id]} {escape_text(p)}" if len(phases) > 1
                             else short[c.config_id] for c in configs for p in phases]
        cols = [(c, p) for c in configs for p in phases]
    rows = []
    for res in residues:
        recs = [(cd, cd.cell(res, p)) for cd, p in cols]
        # a cell that was not run is not a bad cell (another configuration swept less)
        ok = all(r.get("verdict") == "ok" for _, r in recs if r is not None)
        cells = [cell_markdown(r, notes.mark(cd, r)) for cd, r in recs]
        rows.append((res, cells, ok))
    return table(header, _fold_rows(rows, full))


def render_thread_view(configs: list[ConfigData], phase: str, short: dict[str, str],
                       corner: str) -> str:
    """The thread's other shape: configurations as rows, a few residues as columns, one
    measured phase (mjungnickel18's FULL_AND_PIECEWISE / PIECEWISE table)."""
    residues = sorted({r for c in configs for r in c.residues})
    bad_res = {res for c in configs for res in c.residues
               if (c.cell(res, phase) or {}).get("verdict") not in (None, "ok")}
    header = [f"{corner} {escape_text(phase)}"] + [
        _row_label(r, r in bad_res) for r in residues]
    rows = [[short[c.config_id]] + [cell_markdown(c.cell(r, phase)) for r in residues]
            for c in configs]
    return table(header, rows)


def summary_counts(cd: ConfigData) -> str:
    statuses = cd.statuses()
    by: dict[str, list[int]] = defaultdict(list)
    for res, s in statuses.items():
        by[s].append(res)
    parts = [f"{len(by.get('ok', []))} clean"]
    for s in SEVERITY:
        if s == "ok" or s not in by:
            continue
        parts.append(f"{len(by[s])} {s}: {residues_phrase(by[s])}")
    return ", ".join(parts)


def _broken_phases(cd: ConfigData) -> str:
    phases = sorted({r.get("phase") for r in cd.records if r.get("verdict") in BUG_VERDICTS},
                    key=phase_key)
    return ", ".join(escape_text(p) for p in phases)


def render_config_summary(cd: ConfigData, manifest_residues: list[int] | None,
                          full: bool) -> str:
    m = cd.modulus
    covered = cd.residues
    pred = predict_bug_b(cd)
    lines = [f"### {code(cd.label)}", ""]
    phases = ", ".join(escape_text(p) for p in cd.phases)
    cov = f"{len(covered)} of {m} residues (mod {m})"
    if len(covered) < m:
        cov += f": {residues_phrase(covered)}"
    lines.append(f"- **Coverage:** {cov}; phases {phases}; {len(cd.records)} phase records.")
    if manifest_residues:
        missing = sorted(set(manifest_residues) - set(covered))
        if missing:
            lines.append(f"- **Missing:** planned but not on disk: {residues_phrase(missing)} "
                         "(interrupted or resumed run).")
    result = summary_counts(cd)
    bp = _broken_phases(cd)
    if bp:
        result += f" (broken on: {bp})"
    lines.append(f"- **Result:** {result}.")
    lines.append(f"- **Bug B rule:** {pred.why}; {agreement(cd, pred)}.")
    if len(covered) < m:
        lines.append(f"- **Sampling:** {miss_sentence(len(covered), m)}")
    g, nvals = hit_granularity(cd)
    if g and nvals >= 2 and g > m:
        lines.append(f"- **Cache-hit granularity:** the {nvals} distinct `cached_tokens` values "
                     f"are all multiples of {g} (their gcd): hits land on {g}-token units, "
                     f"which a mod-{m} sweep cannot resolve. Set `--prefix-match-unit {m}` "
                     f"or sweep modulo {g}.")
    elif (cd.config.get("effective_hash_unit") or 0) > m:
        u = int(cd.config["effective_hash_unit"])
        lines.append(f"- **Cache-hit granularity:** the server reports cache hits in {u}-token "
                     f"units, which a mod-{m} sweep cannot resolve. Set "
                     f"`--prefix-match-unit {m}` or sweep modulo {u}.")
    ident = cd.identity
    eff = " ".join(f"{n}={_fmt_value(n, cd.config.get(n, ident.get(n)))}"
                   for n in config_fields([ident]) if n in ident
                   and (ident.get(n) is not None or n == "prefix_match_unit"))
    extra = " ".join(f"{n}={_fmt_value(n, v)}" for n, v in sorted(cd.config.items())
                     if n not in ident and n not in VOLATILE and n not in NOT_IDENTITY
                     and v is not None)
    line = f"- **Effective configuration:** {code(eff) if eff else '–'}"
    if extra:
        line += f"; the server reported {code(extra)}"
    lines.append(line)
    mism = sorted({f for r in cd.records for f in (r.get("config_mismatch") or [])})
    if mism:
        detail = []
        for f in mism:
            if re.fullmatch(r"[A-Za-z_]\w*", f):  # a bare field name: say both values
                detail.append(f"{f}: asked {_fmt_value(f, cd.requested.get(f))}, "
                              f"got {_fmt_value(f, cd.config.get(f))}")
            else:  # already a sentence ("max_model_len: requested 245760, server runs …")
                detail.append(f)
        lines.append("- **Config mismatch:** " + escape_text("; ".join(detail)))
    overrides = cd.config.get("overrides") or []
    if overrides:
        lines.append("- **Overrides:** " + escape_text("; ".join(map(str, overrides))))
    notes = [n for n in (cd.config.get("notes") or []) if str(n).startswith("WARNING")]
    for n in notes:
        lines.append("- **Preset warning:** " + escape_text(str(n)))
    pstatus = cd.first("patch_status")
    patches = cd.config.get("patches") or cd.first("patches")
    pline = f"- **Patches:** {code(str(patches))}" if patches else "- **Patches:** –"
    if isinstance(pstatus, dict) and pstatus:
        pline += "; engine reports " + ", ".join(
            f"{escape_text(k)}: {escape_text(str(v))}" for k, v in sorted(pstatus.items()))
    elif pstatus is None:
        pline += "; engine reported no patch status"
    lines.append(pline)
    lines.append("")
    lines.append(render_reruns(cd, full))
    return "\n".join(lines)


def render_reruns(cd: ConfigData, full: bool) -> str:
    """The command lines that rerun this configuration's cells: every non-ok point's, and
    one clean point's as the pattern for the rest (all of them with ``full``)."""
    by_res: dict[int, str] = {}
    for r in sorted(cd.records, key=lambda r: (r.get("residue"), phase_key(r.get("phase") or ""))):
        if r.get("rerun"):
            by_res.setdefault(int(r["residue"]), r["rerun"])
    if not by_res:
        return "Rerun: no `rerun` command recorded."
    statuses = cd.statuses()
    bad = [res for res in sorted(by_res) if statuses.get(res) != "ok"]
    good = [res for res in sorted(by_res) if statuses.get(res) == "ok"]
    lines = []
    shown = set()
    for res in (sorted(by_res) if full else bad + good[:1]):
        cmd = by_res[res]
        if cmd in shown:
            continue
        shown.add(cmd)
        tag = "clean" if statuses.get(res) == "ok" else statuses.get(res)
        lines.append(f"# residue {res} ({tag})")
        lines.append(cmd)
    rest = len(good) - 1
    more = "" if full or rest < 1 else (
        " (one clean point shown; the other clean point reruns the same way with its "
        "residue)" if rest == 1 else
        f" (one clean point shown; the other {rest} clean points rerun the same way with "
        "their residue)")
    return f"Rerun a cell{more}:\n\n" + fence("\n".join(lines), "sh")


def render_ladder(configs: list[ConfigData], short: dict[str, str], corner: str) -> str:
    """Configurations that differ in one or two dimensions (the thread's block / match-unit
    table): one row each, what Bug B did, what the rule predicted."""
    dicts = [c.identity for c in configs]
    if len(configs) < 2 or not all(dicts):
        return ""
    vary = varying_fields(dicts)
    if not 1 <= len(vary) <= 2:
        return ""

    def sort_key(c: ConfigData):
        ident = c.identity
        return tuple((ident.get(n) is not None, str(type(ident.get(n))),
                      ident.get(n) if ident.get(n) is not None else 0) for n in vary)

    try:
        ordered = sorted(configs, key=sort_key)
    except TypeError:
        ordered = configs
    header = [escape_text(SHORT_NAMES.get(n, n)) for n in vary] + [
        "residues swept", "Bug B", "rule predicts"]
    rows = []
    for c in ordered:
        statuses = c.statuses()
        by: dict[str, list[int]] = defaultdict(list)
        for res, s in statuses.items():
            if s != "ok":
                by[s].append(res)
        if not by:
            outcome = "clean"
        else:
            parts = []
            for s, v in sorted(by.items(), key=lambda kv: SEVERITY.index(kv[0])
                               if kv[0] in SEVERITY else 0):
                word = "broken" if s in BUG_VERDICTS else s
                parts.append(f"{word} at {residues_phrase(v)}")
            outcome = "; ".join(parts)
        pred = predict_bug_b(c)
        if pred.residues is None:
            predicted = (f"no residue mod {c.modulus} (hits in {pred.unit}-token units)"
                         if pred.unit else f"no residue mod {c.modulus} (hit unit unknown)")
        elif not pred.residues:
            predicted = "clean"
        else:
            predicted = "broken at " + residues_phrase(pred.residues)
        cells = [escape_text(_fmt_value(n, c.identity.get(n))) for n in vary] + [
            f"{len(statuses)}/{c.modulus}", bold(outcome) if by else outcome, predicted]
        if by:
            cells[0] = bold(cells[0])
        rows.append(cells)
    dims = " × ".join(escape_text(SHORT_NAMES.get(n, n)) for n in vary)
    return (f"## Ladder: {dims}\n\nEverything else equal: {corner}.\n\n" + table(header, rows))


def render_provenance(configs: list[ConfigData], records: list[dict],
                      manifests: list[dict], superseded: int) -> str:
    def distinct(key: str) -> list:
        out = []
        for r in records:
            v = r.get(key)
            if v not in (None, "") and v not in out:
                out.append(v)
        return out

    def join(vals: list, as_code: bool = False) -> str:
        if not vals:
            return "–"
        return ", ".join(code(str(v)) if as_code else escape_text(str(v)) for v in vals)

    runs = distinct("run_id")
    engines = []
    for r in records:
        e = f"{r.get('engine') or '?'} {r.get('engine_version') or ''}".strip()
        if e not in engines:
            engines.append(e)
    starts = sorted(x for x in distinct("started_at"))
    date = "–"
    m_starts = sorted(m.get("started_at") for m in manifests if m.get("started_at"))
    m_ends = sorted(m.get("ended_at") for m in manifests if m.get("ended_at"))
    first = m_starts[0] if m_starts else (starts[0] if starts else None)
    last = m_ends[-1] if m_ends else (starts[-1] if starts else None)
    if first:
        date = escape_text(first) + (f" → {escape_text(last)}" if last and last != first else "")
    rows = [
        ["run", join(runs, True)],
        ["date", date],
        ["engine", join(engines)],
        ["model", join(distinct("model"))],
        ["patch set", join(distinct("patches"), True)],
        ["slot (GPU / CPU)", join(distinct("slot"))],
        ["node", join(distinct("node"))],
        ["isolation", join(distinct("isolation"))],
        ["reference", join(distinct("reference"))],
        ["modulus", join(sorted({c.modulus for c in configs}))],
        ["harness", join(distinct("harness_version"), True)],
    ]
    for m in manifests:
        if m.get("command"):
            rows.append([f"command ({escape_text(m.get('run_id') or '?')})",
                         code(cap(str(m["command"]), 300))])
        sampled = m.get("sampled")
        if isinstance(sampled, dict):
            labels = {c.config_id: c.label for c in configs}
            for cid, note in sampled.items():
                if note:
                    rows.append([f"sampled ({code(labels.get(cid, cid))})",
                                 escape_text(str(note))])
        elif sampled:
            rows.append(["sampled", escape_text(str(sampled))])
        if m.get("interrupted") or (m.get("started_at") and not m.get("ended_at")):
            rows.append(["interrupted", bold(f"run {escape_text(m.get('run_id') or '?')} did "
                                             "not finish")])
        if m.get("exit_code") not in (None, 0):
            rows.append([f"exit code ({escape_text(m.get('run_id') or '?')})",
                         escape_text(str(m["exit_code"]))])
    iso = distinct("isolation")
    notes = []
    if any(i != "fresh" for i in iso):
        notes.append(f"Isolation {join([i for i in iso if i != 'fresh'])}: weaker than one fresh "
                     "server per data point; blocks from earlier requests can leak into later "
                     "ones.")
    if superseded:
        notes.append(f"{superseded} older record(s) of the same cell were superseded by newer "
                     "ones (latest `started_at` wins).")
    text = "## Provenance\n\n" + table(["", "value"], rows)
    if notes:
        text += "\n\n" + "\n".join(f"- {n}" for n in notes)
    return text


def render_markdown(records: list[dict], manifests: list[dict] | None = None, *,
                    full: bool = False, title: str | None = None) -> str:
    """The whole report as GitHub-flavoured markdown.

    ``records``: phase records of one or more runs (docs/records.md). ``manifests``: their
    run manifests (optional: they add the command line, the dates, planned-but-missing
    residues and the interrupted flag). ``full``: one row per residue, no folding, and every
    rerun command line."""
    manifests = [m for m in (manifests or []) if m]
    if not records:
        return (f"# {title or 'Residue sweep report'}\n\nNo records: nothing was measured.\n")
    recs, superseded = latest_records(records)
    configs = group_configs(recs)
    short, corner = short_labels(configs)
    planned = sorted({int(x) for m in manifests for x in (m.get("residues") or [])})

    total_cells = len(recs)
    bad_cells = sum(1 for r in recs if r.get("verdict") != "ok")
    points = sum(len(c.residues) for c in configs)
    bad_points = sum(1 for c in configs for s in c.statuses().values() if s != "ok")
    if title is None:
        if len(configs) == 1:
            title_md = "Residue sweep: " + code(configs[0].label)
        elif len(configs) <= 4 and corner != "configuration":
            title_md = (f"Residue sweep: {corner}, "
                        + " vs ".join(short[c.config_id] for c in configs))
        else:
            title_md = f"Residue sweep: {len(configs)} configurations"
    else:
        title_md = escape_text(title)
    out = [f"# {title_md}", ""]
    headline = (f"{len(configs)} configuration{'s' if len(configs) != 1 else ''}, "
                f"{points} data point{'s' if points != 1 else ''}, "
                f"{total_cells} phase cell{'s' if total_cells != 1 else ''}: ")
    headline += (bold(f"{bad_points} point{'s' if bad_points != 1 else ''} not ok "
                      f"({bad_cells} cell{'s' if bad_cells != 1 else ''})")
                 if bad_points else "all ok")
    out += [headline + ".", ""]
    for cd in configs:
        out.append(f"- {code(cd.label)}: {summary_counts(cd)}.")
    out.append("")

    notes = _Footnotes()
    out += ["## Results", ""]
    if len(configs) > 1:
        out += [f"Columns: {escape_text(', '.join(varying_fields([c.identity for c in configs])) or 'configuration')}"
                f" × phase; a clean cell is verbatim `n/N`, a bad one is bold.", ""]
    else:
        out += ["A clean cell is verbatim `n/N` (chars of the answer found verbatim in the "
                "source / answer length); a bad cell is bold.", ""]
    out.append(render_results_table(configs, notes, full=full, short=short, corner=corner))
    out.append("")
    residues_all = sorted({r for c in configs for r in c.residues})
    if len(configs) > 1 and len(residues_all) <= 8:
        hit_phases = [p for p in sorted({p for c in configs for p in c.phases}, key=phase_key)
                      if p != "cold"]
        for p in hit_phases[-1:]:
            out += [f"The measured {escape_text(p)} request, thread style:", "",
                    render_thread_view(configs, p, short, corner), ""]
    fn = notes.render(len(configs) > 1, short)
    if fn:
        out += [fn, ""]

    ladder = render_ladder(configs, short, corner)
    if ladder:
        out += [ladder, ""]

    out += ["## Summary per configuration", ""]
    for cd in configs:
        out += [render_config_summary(cd, planned or None, full), ""]

    from .backends.nodes import render_nodes
    nodes = render_nodes(recs)   # "" unless the records ran on several nodes
    if nodes:
        out += [nodes, ""]

    out.append(render_provenance(configs, recs, manifests, superseded))
    out.append("")
    return "\n".join(out)


def write_report(records: list[dict], manifests: list[dict] | None, path, *,
                 full: bool = False, **kwargs: Any) -> pathlib.Path:
    """Render and write the report; returns its path (parents created)."""
    p = pathlib.Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    text = render_markdown(records, manifests, full=full, **kwargs)
    tmp = p.with_name(p.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(p)
    return p


def load_inputs(paths: Iterable, out_dir="results") -> tuple[list[dict], list[dict]]:
    """Records and manifests of results files / run ids (convenience for the CLI)."""
    from .store import load_manifest_for, load_records, resolve_results

    paths = list(paths)
    records = load_records(paths, out_dir)
    manifests = []
    for ref in paths:
        m = load_manifest_for(resolve_results(ref, out_dir))
        if m:
            manifests.append(m)
    return records, manifests
