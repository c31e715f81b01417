"""Gating a merge on a sweep: exit codes, JUnit XML, GitHub step summary, issue comments.

- With a baseline, a sweep fails (exit 1) only on *regressions*: a (configuration,
  residue, phase) cell that was ok in the baseline and is not ok now. A cell broken in the
  baseline and still broken does not fail the gate (it is a known bug, and the report says
  so); neither does a newly covered cell (there is nothing to regress from).
- Without a baseline, any non-ok cell fails, but for the cells that are the reference
  (``records.recordkeys.reference_cells``: under ``--reference cold`` the cold answers the hits
  were judged against, under ``first`` the first configuration's): they are the measure,
  not judged, and the cells judged against them decide. A run with no judged cell fails.
- A sweep with no records at all fails either way, and with a baseline so does a sweep
  that judged no cell (``judged_any``): a gate that measured nothing must not pass.
- With a baseline, shrinking coverage fails too (``find_coverage_losses``): a cell the
  baseline judged (ok, diverged, broken) that is missing now, or that nothing judged now
  (invalid, crash, timeout, boot-fail, infra, unjudged), unless ``--allow-fewer`` is given.
  A known-broken cell that failed to boot says nothing about the bug: a run whose every
  point failed to boot must not read as a pass.
- ``gate_block`` is what the gate found, cell by cell (the manifest's ``baseline`` block):
  the stdout lines, the report's baseline section, the JUnit and the Action's comment all
  name each regressed or lost cell from it.
"""
from __future__ import annotations

import os
import pathlib
import shutil
import subprocess
import xml.etree.ElementTree as ET
from typing import Iterable

from ..text.ghmarkdown import cap
from .outfile import write_output
from .compare import compare_records
from .comparison import Comparison
from ..records.phase_record import PhaseRecord, RecordsIn, typed
from ..records.recordkeys import auto_pass, cell_key, document_of, latest_records, reference_cells
from ..names.verdict import CLEAN, JUDGED, NOT_FAILED, OPEN, UNJUDGED
from ..names.phase import phase_key
from ..errors import ExitCode, HandledError
from ..records.gate_block import BaselineBlock, GateCell, StillBroken

EXIT_OK, EXIT_FAIL = ExitCode.OK, ExitCode.NOT_OK
EXCERPT_CHARS = 200
# GitHub limits: a step summary is at most 1 MiB, an issue comment 65,536 characters.
STEP_SUMMARY_LIMIT = 1024 * 1024
ISSUE_COMMENT_LIMIT = 65536


class GateError(HandledError, RuntimeError):
    """A gate action that could not be carried out (e.g. ``gh`` missing or failing)."""


class GhNotFound(GateError):
    pass


def _regressions(comparison: Comparison) -> list[GateCell]:
    """The gate's cells of the comparison's regressions (their cell, verdicts, rerun)."""
    return [GateCell(config_id=r.config_id, config_label=r.config_label, residue=r.residue,
                     phase=r.phase, old_verdict=r.old_verdict, new_verdict=r.new_verdict,
                     document=r.document, rerun=r.rerun) for r in comparison.regressions]


def _losses(comparison: Comparison) -> list[GateCell]:
    out = []
    for c, pt, phase, cell in comparison.cells():
        old, now = cell.old, cell.new
        if old is None or old.verdict not in JUDGED:
            continue
        if now is not None and (now.verdict in JUDGED or old.verdict in CLEAN):
            continue
        out.append(GateCell(config_id=c.config_id, config_label=c.config_label,
                            residue=pt.residue, phase=phase, old_verdict=old.verdict,
                            new_verdict=now.verdict if now else None,
                            rerun=(now or old).rerun))
    return out


def find_regressions(baseline: list[PhaseRecord], new: list[PhaseRecord]) -> list[GateCell]:
    """Cells ok in ``baseline`` and not ok in ``new``: one ``GateCell`` per (config,
    residue, phase) with the old and new verdict and the rerun line."""
    return _regressions(compare_records(baseline, new))


def find_coverage_losses(baseline: list[PhaseRecord], new: list[PhaseRecord]
                         ) -> list[GateCell]:
    """Cells the baseline judged (its verdict ok, diverged or broken) that are missing now
    or whose verdict now is not a judgement (invalid, crash, timeout, boot-fail, infra,
    unjudged): one ``GateCell`` per (config, residue, phase), ``new_verdict`` None when
    missing. A cell ok in the baseline and present now is a regression
    (``find_regressions``), listed there and not here. Configurations are matched as
    ``sweep compare`` matches them."""
    return _losses(compare_records(baseline, new))


def coverage_line(loss: GateCell) -> str:
    """``<label> residue 4 self-hit: broken in the baseline, boot-fail now``."""
    now = loss.new_verdict or "missing"
    return (f"{loss.config_label} residue {loss.residue} {loss.phase}: "
            f"{loss.old_verdict} in the baseline, {now} now")


def regression_line(reg: GateCell) -> str:
    """``<label> residue 4 self-hit: ok -> broken``."""
    return (f"{reg.config_label} residue {reg.residue} {reg.phase}: "
            f"{reg.old_verdict} -> {reg.new_verdict}")


def gate_block(baseline: RecordsIn, records: RecordsIn, *, source: str,
               allow_fewer: bool = False) -> BaselineBlock:
    """What the gate found against ``baseline``, cell by cell, and its verdict, decided
    here once (``passed``: some cell judged, no regression, no lost coverage unless
    ``allow_fewer``); the run's comparison with the baseline is made once. The manifest's
    ``baseline`` block; ``gate_exit_code`` reads its ``passed``."""
    baseline, records = typed(baseline), typed(records)
    comparison = compare_records(baseline, records)
    regs, losses = _regressions(comparison), _losses(comparison)
    runs = sorted({str(r.run_id) for r in baseline if r.run_id})
    judged = judged_any(records)
    passed = judged and not regs and (allow_fewer or not losses)
    return BaselineBlock(source=str(source), runs=runs, regressions=tuple(regs),
                         losses=tuple(losses), still_broken=still_broken_bytes(comparison),
                         allow_fewer=allow_fewer, judged_any=judged, passed=passed)


def still_broken_bytes(comparison: Comparison) -> tuple[StillBroken, ...]:
    """Cells not ok in the baseline and now (they do not fail the gate), each with what its
    bytes say (``records/same_compile.bytes_between``): ``bytes`` same / changed /
    not_comparable and ``why``; bytes are compared only under one compile fingerprint."""
    return tuple(StillBroken(config_id=c.config_id, config_label=c.config_label,
                             residue=pt.residue, phase=phase, old_verdict=cell.old.verdict,
                             new_verdict=cell.new.verdict, bytes=cell.bytes["bytes"],
                             why=cell.bytes["why"])
                 for c, pt, phase, cell in comparison.cells() if cell.bytes)


def gate_summary(block: BaselineBlock) -> str:
    """The gate's one status line (stderr): its verdict and counts; the cells are in the
    terminal report (``gate_lines``) and the report file."""
    regs, losses = block.regressions, block.losses
    said = f"gate: {len(regs)} regression(s) against {block.source}"
    if losses:
        said += (f", {len(losses)} cell(s) of lost coverage"
                 f"{' (allowed: --allow-fewer)' if block.allow_fewer else ''}")
    if not block.judged_any:
        said += ", no cell judged"
    return said + f": {'passed' if block.passed else 'failed'}"


def gate_lines(block: BaselineBlock, limit: int = 20) -> list[str]:
    """The gate on stdout (the terminal report's end): its verdict, then each regressed
    and lost cell with its rerun line (at most ``limit`` of each, then how many more)."""
    regs, losses = block.regressions, block.losses
    lines = [f"gate: {len(regs)} regression(s) against {block.source}"]
    if not block.judged_any:
        lines.append("gate: failed: no cell of this run was judged (every one boot-fail, "
                     "invalid, crash, timeout, infra or unjudged): a gate that measured "
                     "nothing does not pass")
    for reg in regs[:limit]:
        lines += [f"  regressed: {regression_line(reg)}", f"    rerun: {reg.rerun or '-'}"]
    if len(regs) > limit:
        lines.append(f"  ... and {len(regs) - limit} more regression(s): see the report")
    if losses:
        allowed = " (allowed: --allow-fewer)" if block.allow_fewer else ""
        lines.append(f"gate: {len(losses)} cell(s) the baseline judged are missing or not "
                     f"judged now (lost coverage){allowed}:")
        for loss in losses[:limit]:
            lines += [f"  coverage: {coverage_line(loss)}",
                      f"    rerun: {loss.rerun or '-'}"]
        if len(losses) > limit:
            lines.append(f"  ... and {len(losses) - limit} more: see the report")
    return lines


def judged_any(records: list[PhaseRecord]) -> bool:
    """Whether any cell of ``records`` was judged (ok, diverged, broken): a run whose
    every point failed to boot (or was invalid, ...) measured nothing, against any
    baseline."""
    recs, _ = latest_records(records)
    return any(r.verdict in JUDGED for r in recs)


def gate_exit_code(records: RecordsIn, baseline: RecordsIn | None = None, *,
                   allow_empty: bool = False, allow_fewer: bool = False,
                   block: BaselineBlock | None = None) -> int:
    """0 when the sweep passes, 1 when it fails (see the module docstring). Against a
    baseline the verdict is ``gate_block``'s ``passed`` (``block`` when the caller made
    it already: the sweep's own, written to its manifest)."""
    records = typed(records)
    if not records:
        return EXIT_OK if allow_empty else EXIT_FAIL
    if block is None and baseline is not None:
        block = gate_block(baseline, records, source="", allow_fewer=allow_fewer)
    if block is not None:
        return EXIT_OK if block.passed else EXIT_FAIL
    recs, _ = latest_records(records)
    refs = reference_cells(recs)   # --reference cold / first: the measure, not judged
    judged = [r for r in recs if cell_key(r) not in refs]
    return EXIT_FAIL if not judged or any(r.verdict not in CLEAN for r in judged) else EXIT_OK


# ----------------------------------------------------------------------------------------
# JUnit XML
# ----------------------------------------------------------------------------------------
def _xml_safe(text) -> str:
    """Text XML 1.0 can carry: characters it forbids (most C0 controls, surrogates,
    U+FFFE/U+FFFF) become ``\\xNN`` escapes. ElementTree escapes ``<``, ``&``, quotes."""
    out = []
    for ch in "" if text is None else str(text):
        cp = ord(ch)
        if cp in (0x9, 0xA, 0xD) or 0x20 <= cp <= 0xD7FF or 0xE000 <= cp <= 0xFFFD \
                or 0x10000 <= cp <= 0x10FFFF:
            out.append(ch)
        else:
            out.append(f"\\x{cp:02x}" if cp < 0x100 else f"\\u{cp:04x}")
    return "".join(out)


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


def testcase_name(r: PhaseRecord, documents: bool = False) -> str:
    """One name per cell: with the case (--prompts), the document when a run measured
    several (``--seed`` lists) and the auto pass, so no two testcases share a name
    (single-document names stay as they were)."""
    case = f" case {r.case_id}" if r.case_id else ""
    name = f"{r.config_label or r.config_id}{case} residue {r.residue} {r.phase}"
    if documents:
        name += f" document {document_of(r)}"
    if auto_pass(r):
        name += f" {auto_pass(r)}"
    return name


def failure_message(r: PhaseRecord) -> str:
    """``broken: sha1 da39a3ee5e6b: "" (empty answer, finish_reason=stop)``."""
    ans = r.answer or ""
    excerpt = cap(ans, EXCERPT_CHARS) if ans else ""
    sha = (r.sha1 or "")[:12] or "-"
    return _one_line(f"{r.verdict}: sha1 {sha}: {excerpt!r} ({r.reason or ''})")


def _failure_text(r: PhaseRecord) -> str:
    """A failing testcase's text: what the record says about the cell, its log lines and
    the command that reruns it."""
    lines = [f"verdict: {r.verdict}", f"reason: {r.reason}", f"sha1: {r.sha1}",
             f"verbatim: {r.verbatim_n}/{r.verbatim_total}",
             f"finish_reason: {r.finish_reason}", f"tok/step: {r.tok_per_step}",
             f"cached_tokens: {r.cached_tokens} (computed tail {r.computed_tail})",
             f"answer: {cap(r.answer or '', EXCERPT_CHARS)!r}"]
    lines += [f"log: {line}" for line in r.log_excerpt or []]
    if r.rerun:
        lines.append(f"rerun: {r.rerun}")
    return _xml_safe("\n".join(lines))


def _gate_suite(root: ET.Element, kind: str, entries: Iterable[GateCell]) -> None:
    """The ``regression`` or ``coverage`` suite: one failing testcase per cell the gate
    failed on, its message the cell's old -> new verdict, its text the rerun line."""
    suite = ET.SubElement(root, "testsuite", {
        "name": kind, "tests": str(len(entries)), "failures": str(len(entries)),
        "errors": "0", "skipped": "0", "time": "0.000"})
    line = regression_line if kind == "regression" else coverage_line
    hint = "" if kind == "regression" else "; pass --allow-fewer to accept less coverage"
    for entry in entries:
        case = ET.SubElement(suite, "testcase", {
            "name": _xml_safe(f"{entry.config_label} residue {entry.residue} "
                              f"{entry.phase}"),
            "classname": f"residue_sweep.{kind}", "time": "0.000"})
        fail = ET.SubElement(case, "failure", {"message": _xml_safe(line(entry)),
                                               "type": kind})
        fail.text = _xml_safe(f"{line(entry)}{hint}\nrerun: {entry.rerun or '-'}")


def write_junit(records: RecordsIn, path, *, suite_name: str = "residue-sweep",
                coverage_losses: Iterable[GateCell] | None = None,
                regressions: Iterable[GateCell] | None = None) -> pathlib.Path:
    """JUnit XML: one ``<testsuite>`` per configuration, one ``<testcase>`` per data point ×
    phase (name: configuration label, residue, phase). A non-ok cell gets a ``<failure>``
    whose ``type`` is the verdict and whose message carries verdict, sha1 (12 hex) and the
    answer excerpt; its text adds reason, log lines and the rerun command. An ``unjudged``
    cell is ``<skipped>`` (nothing judged it: neither a pass nor a failure). Each of
    ``regressions`` (``find_regressions``) is a failing testcase of type ``regression`` in
    a ``regression`` suite, each of ``coverage_losses`` (``find_coverage_losses``) one of
    type ``coverage`` in a ``coverage`` suite: the cells the gate failed on, by name."""
    recs, _ = latest_records(typed(records))
    refs = reference_cells(recs)
    by_cfg: dict[str, list[PhaseRecord]] = {}
    for r in recs:
        by_cfg.setdefault(r.config_id or r.config_label or "?", []).append(r)
    root = ET.Element("testsuites", name=suite_name)
    # (tests, failures, skipped, time) of each configuration's suite, then of the gate's
    counts = [_config_suite(root, cid, rs, refs) for cid, rs in by_cfg.items()]
    for kind, cells in (("regression", regressions), ("coverage", coverage_losses)):
        entries = list(cells or ())
        if entries:
            _gate_suite(root, kind, entries)
            counts.append((len(entries), len(entries), 0, 0.0))
    tests, failures, skipped, seconds = (sum(c) for c in zip(*counts)) if counts else (0, 0, 0, 0.0)
    root.set("tests", str(tests))
    root.set("skipped", str(skipped))
    root.set("failures", str(failures))
    root.set("errors", "0")
    root.set("time", f"{seconds:.3f}")
    p = pathlib.Path(path)
    ET.indent(root)
    write_output(p, ET.tostring(root, encoding="utf-8", xml_declaration=True))
    return p


def _config_suite(root: ET.Element, cid: str, rs: list[PhaseRecord],
                  refs) -> tuple[int, int, int, float]:
    """One configuration's ``<testsuite>``: (tests, failures, skipped, time) of it."""
    rs.sort(key=lambda r: (r.case_id or "", int(r.residue or 0), phase_key(r.phase or ""),
                           document_of(r), auto_pass(r) or ""))
    label = rs[0].config_label or cid
    several_docs = len({document_of(r) for r in rs}) > 1
    skips = sum(1 for r in rs if r.verdict in OPEN)
    fails = sum(1 for r in rs if r.verdict not in NOT_FAILED)
    t = sum(float(r.latency_s or 0.0) for r in rs)
    starts = sorted(r.started_at for r in rs if r.started_at)
    attrs = {"name": _xml_safe(label), "tests": str(len(rs)), "failures": str(fails),
             "errors": "0", "skipped": str(skips), "time": f"{t:.3f}"}
    if starts:
        attrs["timestamp"] = _xml_safe(starts[0][:19])
    node = rs[0].node
    if node:
        attrs["hostname"] = _xml_safe(node)
    suite = ET.SubElement(root, "testsuite", attrs)
    props = ET.SubElement(suite, "properties")
    for key in ("config_id", "run_id", "engine", "engine_version", "patches", "model",
                "slot", "isolation", "harness_version"):
        if getattr(rs[0], key) is not None:
            ET.SubElement(props, "property", name=key, value=_xml_safe(getattr(rs[0], key)))
    for r in rs:
        _testcase(suite, cid, r, several_docs, refs)
    return len(rs), fails, skips, t


def _testcase(suite: ET.Element, cid: str, r: PhaseRecord, several_docs: bool, refs) -> None:
    case = ET.SubElement(suite, "testcase", {
        "name": _xml_safe(testcase_name(r, several_docs)),
        "classname": _xml_safe(f"residue_sweep.{cid}"),
        "time": f"{float(r.latency_s or 0.0):.3f}"})
    if r.verdict == UNJUDGED:
        why = (f"reference: the answer other cells were judged against (--reference "
               f"{r.reference}), not judged" if cell_key(r) in refs
               else f"unjudged: {r.reason or 'no reference'}")
        ET.SubElement(case, "skipped", {"message": _xml_safe(_one_line(why))})
    elif r.verdict not in CLEAN:
        fail = ET.SubElement(case, "failure", {
            "message": _xml_safe(failure_message(r)),
            "type": _xml_safe(r.verdict or "invalid")})
        fail.text = _failure_text(r)
    if r.rerun:
        out = ET.SubElement(case, "system-out")
        out.text = _xml_safe(f"rerun: {r.rerun}")


# ----------------------------------------------------------------------------------------
# GitHub
# ----------------------------------------------------------------------------------------
def append_github_step_summary(markdown: str) -> bool:
    """Append ``markdown`` to ``$GITHUB_STEP_SUMMARY`` (GitHub Actions); False when unset.
    A summary over GitHub's 1 MiB limit is cut with a note (rerun with the report file)."""
    target = os.environ.get("GITHUB_STEP_SUMMARY")
    if not target:
        return False
    text = markdown if markdown.endswith("\n") else markdown + "\n"
    data = text.encode("utf-8")
    if len(data) > STEP_SUMMARY_LIMIT - 256:
        note = "\n\n*(report cut to fit GitHub's 1 MiB step-summary limit; see the report file)*\n"
        data = data[: STEP_SUMMARY_LIMIT - 256 - len(note)].decode("utf-8", "ignore").encode() \
            + note.encode()
    write_output(target, data, append=True)
    return True


def post_issue_comment(markdown_path, issue: int, *, repo: str | None = None,
                       gh: str | None = None) -> None:
    """Post the report as a comment on issue/PR ``issue`` with
    ``gh issue comment N --body-file FILE [--repo OWNER/NAME]``.

    Raises :class:`GhNotFound` when the GitHub CLI is not on PATH, :class:`GateError` when
    the file is missing or too long for a comment, or gh fails (its stderr included)."""
    path = pathlib.Path(markdown_path)
    try:
        number = int(issue)
    except (TypeError, ValueError):
        raise GateError(f"--gh-issue needs an issue number, got {issue!r}") from None
    if number <= 0:
        raise GateError(f"--gh-issue needs a positive issue number, got {issue!r}")
    if not path.is_file():
        raise GateError(f"report {path} does not exist")
    size = len(path.read_text(encoding="utf-8"))
    if size > ISSUE_COMMENT_LIMIT:
        raise GateError(f"report {path} is {size} characters; a GitHub comment takes at most "
                        f"{ISSUE_COMMENT_LIMIT}. Post the folded report (without --full) or "
                        "attach the file.")
    exe = gh or shutil.which("gh")
    if not exe:
        raise GhNotFound("`gh` (GitHub CLI) is not on PATH: install it from https://cli.github.com "
                         f"and run `gh auth login`, or paste {path} into issue #{number} by hand")
    argv = [exe, "issue", "comment", str(number), "--body-file", str(path)]
    if repo:
        argv += ["--repo", repo]
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise GateError(f"`gh issue comment` could not run: {e}") from e
    if proc.returncode != 0:
        raise GateError(f"`gh issue comment {number}` failed (exit {proc.returncode}): "
                        f"{(proc.stderr or proc.stdout).strip()}")


__all__ = ["find_regressions", "find_coverage_losses", "coverage_line", "regression_line",
           "gate_block", "gate_lines", "gate_summary", "judged_any", "JUDGED",
           "gate_exit_code", "write_junit", "append_github_step_summary",
           "post_issue_comment", "GateError", "GhNotFound", "EXIT_OK", "EXIT_FAIL"]
