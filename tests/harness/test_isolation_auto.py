"""``--isolation auto`` end to end: the lab engine (unpatched FULL mtp, residue 4 broken on
a restored and on a fresh server: the lab has sleep mode, so auto's reuse pass is
``restore``) and the fake engine (no sleep mode: the reuse pass is ``reset``; a break only
a fresh server's first request shows, which a reset sweep hides: issue 17), through the
real CLI."""
from __future__ import annotations

import json
import sys
from collections import Counter

import pytest

from tests.conftest import ROOT, fake_cmd

pytestmark = pytest.mark.usefixtures("no_leftovers")


def sweep(cli, *args: str, timeout: float = 300):
    """A sweep through ``cli``: its process, records, manifest and report."""
    proc = cli.sweep(*args, timeout=timeout)
    assert len(list((cli.tmp / "results").glob("*.jsonl"))) == 1, proc.stderr[-3000:]
    return proc, cli.records(), cli.manifest(), cli.report()


@pytest.mark.slow
def test_auto_on_the_lab_full_mtp_unpatched(tmp_path, cli):
    proc, recs, manifest, report = sweep(
        cli, "--model", cli.lab_model(), "--spec", "mtp", "--ctx", "huge", "--cudagraph",
        "FULL", "--patches", "none", "--residues", "0-19", "--isolation", "auto",
        "--auto-sample", "2", "--context", "1200", "--slots", "2",
        "--poison", "off")   # the sleep cycle: restore's means without the fill
    assert proc.returncode == 1, proc.stderr[-2000:]
    assert all(r["isolation_run"] == "auto" for r in recs)
    cells = Counter((r["isolation"], r["document_seed"], r["residue"], r["phase"]) for r in recs)
    assert set(cells.values()) == {1}            # one record per pass, document, residue, phase
    reset0 = {res for iso, doc, res, _ in cells if iso == "restore" and doc == 0}
    assert reset0 == set(range(20))              # the whole restore sweep on document 0
    assert not any(iso == "reset" for iso, *_ in cells)
    # the rule's k, k+1, k+2 on two documents (the next seed is added), on both passes
    for iso in ("restore", "fresh"):
        assert {res for i, doc, res, _ in cells if i == iso and doc == 1} == {3, 4, 5}
    fresh = {(doc, r["residue"]): r["confirms"] for r in recs if r["isolation"] == "fresh"
             for doc in [r["document_seed"]]}
    assert {k for k, why in fresh.items() if why == "rule neighbourhood"} == {
        (d, res) for d in (0, 1) for res in (3, 4, 5)}
    sample = {res for (d, res), why in fresh.items() if why == "sample"}
    assert len(sample) == 2 and not sample & {3, 4, 5}
    # residue 4 broken on a restored and on a fresh server, on both documents
    bad = {(r["isolation"], r["document_seed"], r["residue"], r["phase"]) for r in recs
           if r["verdict"] != "ok"}
    assert bad == {(iso, d, 4, "self-hit") for iso in ("restore", "fresh") for d in (0, 1)}
    # every restore-pass point but the first on each server was restored, and proven
    proofs = [r["restore"] for r in recs if r["isolation"] == "restore"]
    assert {p["means"] for p in proofs} <= {"sleep-level-1+wake+reset", "boot"}
    assert all(p["discarded_gib"] > 0 for p in proofs if p["means"] != "boot")
    # restore servers ran in sleep mode, the fresh confirmations on plain servers
    assert {r["config"]["enable_sleep_mode"] for r in recs if r["isolation"] == "restore"} == {True}
    assert {r["config"]["enable_sleep_mode"] for r in recs if r["isolation"] == "fresh"} == {False}
    # the report: agreement line, fresh verdicts in the table, a Timing section
    both = 2 * (6 + 2)    # phases x fresh points, each also measured on restore
    assert (f"Restore vs fresh (`--isolation auto`): {both} cells measured on both, {both} "
            f"agree ({both - 2} both ok, 2 both not ok), 0 disagree; only a fresh server "
            "caught: none") in report
    assert "2/2 documents; fresh" in report and "## Timing" in report
    passes = manifest["timing"]["passes"]
    assert passes["restore"]["points"] == 23 and passes["fresh"]["points"] == 8
    assert passes["all_fresh_estimate_s"] > 0 and manifest["isolation"] == "auto"
    assert manifest["documents"] == [0, 1]
    # the plan, per configuration and pass, for a report of an interrupted run
    assert manifest["plan"] == {"points": 31,
                                "by_config": {recs[0]["config_id"]: {"restore": 23, "fresh": 8}}}


@pytest.mark.slow
def test_auto_catches_what_only_a_fresh_server_shows(tmp_path, tok_dir, cli):
    # The fake engine breaks residue 9 only on a server's first request: the reset sweep
    # (one server, residue 9 is not its first) is clean there, the fresh sample is not.
    proc, recs, manifest, report = sweep(
        cli, "--engine", "cmd", "--model", str(tok_dir), "--server-cmd",
        fake_cmd(tok_dir, "--break-first-cold-residue", "9"), "--context", "800",
        "--residues", "8-10", "--isolation", "auto", "--auto-sample", "3", "--slots", "1",
        "--seed", "0,1")
    assert proc.returncode == 1, proc.stderr[-2000:]
    by = {(r["isolation"], r["document_seed"], r["residue"], r["phase"]): r["verdict"]
          for r in recs}
    for doc in (0, 1):
        assert by[("reset", doc, 9, "cold")] == "ok"
        assert by[("fresh", doc, 9, "cold")] == "broken"
    assert ("0 both not ok), 2 disagree; only a fresh server caught: residue 9 cold "
            "(document 0, broken); residue 9 cold (document 1, broken); only a reset "
            "server caught: none.") in report
    assert "⚠ reset ok, fresh broken" in report


@pytest.mark.slow
def test_a_reset_break_gets_its_fresh_confirmation_at_run_time(tmp_path, tok_dir, cli):
    # Residue 7 breaks on a hit (reset and fresh alike) and is in no planned fresh set:
    # its fresh twin is added when the reset point finishes.
    proc, recs, manifest, report = sweep(
        cli, "--engine", "cmd", "--model", str(tok_dir), "--server-cmd",
        fake_cmd(tok_dir, "--break-residue", "7"), "--context", "800",
        "--residues", "6-8", "--isolation", "auto", "--auto-sample", "0", "--slots", "2",
        "--spec", "none")
    assert proc.returncode == 1, proc.stderr[-2000:]
    fresh = {(r["residue"], r["confirms"]) for r in recs if r["isolation"] == "fresh"}
    assert fresh == {(7, "not ok on reset")}
    assert "not ok on reset, fresh confirmation added" in proc.stderr
    assert manifest["timing"]["passes"]["fresh"]["points"] == 1
    # the twin added at run time is in the recorded plan
    assert manifest["plan"]["by_config"][recs[0]["config_id"]] == {"reset": 3, "fresh": 1}


def test_auto_is_refused_where_it_cannot_run(tmp_path, tok_dir, cli):
    proc = cli("--auto-sample", "2", "--dry-run")
    assert proc.returncode == 2 and "--auto-sample is for --isolation auto" in proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize("nth", [2, 3])
def test_a_boot_that_fails_once_is_retried_not_given_up(tmp_path, tok_dir, cli, nth):
    # Issue 33 item 8 (2nd server) and issue 23 item 1 (3rd: a fresh confirmation): one
    # server dies at boot like an OOM with several servers on one GPU. Whichever pass it
    # was, its point boots again and is measured: no cell is boot-fail, the reset sweep is
    # whole, and the point's records say it took two boots, and why.
    proc, recs, manifest, report = sweep(
        cli, "--engine", "cmd", "--model", str(tok_dir), "--server-cmd",
        fake_cmd(tok_dir, "--fail-boot", str(nth), "--boot-count-dir",
                 str(tmp_path / "boots"), "--reply-delay", "0.05"),
        "--context", "800", "--residues", "0-15", "--isolation", "auto", "--auto-sample",
        "4", "--slots", "2", "--spec", "none")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert not [r for r in recs if r["verdict"] == "boot-fail"]
    reset = {r["residue"]: r["verdict"] for r in recs if r["isolation"] == "reset"
             and r["document_seed"] == 0}
    assert reset == {res: "ok" for res in range(16)}, reset
    retried = [r for r in recs if (r.get("server_boot") or {}).get("attempts") == 2]
    assert retried and all("CUDA out of memory" in r["server_boot"]["failed_attempts"][0]
                           for r in retried)
    assert len({r["server_boot"]["log"] for r in retried}) == 1   # one server, booted twice


def test_a_reset_pass_that_cannot_boot_leaves_no_residue_without_a_verdict(tmp_path, tok_dir,
                                                                            cli):
    # Issue 33 item 8: the reset server fails both its boots (1 and 2), so the reset pass
    # is given up. Every residue still gets a fresh verdict, and a boot-fail is neither a
    # catch nor a disagreement in the agreement line.
    proc, recs, manifest, report = sweep(
        cli, "--engine", "cmd", "--model", str(tok_dir), "--server-cmd",
        fake_cmd(tok_dir, "--fail-boot", "1,2", "--boot-count-dir", str(tmp_path / "boots")),
        "--context", "800", "--residues", "0-7", "--isolation", "auto", "--auto-sample",
        "2", "--slots", "1", "--spec", "none")
    assert proc.returncode == 1, proc.stderr[-2000:]
    reset = [r for r in recs if r["isolation"] == "reset"]
    assert {r["verdict"] for r in reset} == {"boot-fail"}
    assert sorted(r["server_boot"]["attempts"] for r in reset if r["phase"] == "cold") == \
        [0] * 7 + [2]
    fresh = {r["residue"]: r["verdict"] for r in recs if r["isolation"] == "fresh"}
    assert fresh == {res: "ok" for res in range(8)}, fresh
    assert ": 0 cells measured on both (16 more on both passes not compared: unjudged, " \
        "boot-fail, invalid or infra on one or both), 0 agree" in report
    assert "0 disagree; only a fresh server caught: none; only a reset server caught: " \
        "none." in report


HOSTILE = ROOT / "tests" / "servers" / "misbehaving_engine.py"


def test_a_diverged_reset_cell_under_consensus_gets_its_fresh_confirmation(tmp_path, tok_dir,
                                                                          cli):
    # Issue 23, item 4: one wrong word at residue 7 on a hit is `diverged`, which only the
    # matrix reference (consensus) says, after the answers are in: the reset pass's
    # diverged point still gets its fresh twin.
    cmd = " ".join([sys.executable, str(HOSTILE), "--port", "{port}", "--model", str(tok_dir),
                    "--misbehave", "one-word", "--at-residue", "7", "--only-hit"])
    proc, recs, manifest, report = sweep(
        cli, "--engine", "cmd", "--model", str(tok_dir), "--server-cmd", cmd,
        "--context", "800", "--residues", "4-9", "--isolation", "auto", "--auto-sample", "0",
        "--slots", "2", "--spec", "none", "--reference", "consensus")
    assert proc.returncode == 1, proc.stderr[-2000:]
    by = {(r["isolation"], r["residue"], r["phase"]): r["verdict"] for r in recs}
    assert by[("reset", 7, "self-hit")] == "diverged"
    assert by[("fresh", 7, "self-hit")] == "diverged"
    fresh = {(r["residue"], r["confirms"]) for r in recs if r["isolation"] == "fresh"}
    assert fresh == {(7, "not ok on reset")}
    # --resume of the same run cut off before its end (its records on disk still unjudged,
    # the fresh twin not yet run): the reset points of the first process are judged with
    # the pass, and the twin is added again
    path = cli.results_file()
    kept = [dict(r, verdict="unjudged", first_divergence=None) for r in recs
            if r["isolation"] != "fresh"]
    path.write_text("".join(json.dumps(r) + "\n" for r in kept))
    resumed = cli("--resume", manifest["run_id"], "--out", cli.tmp / "results",
                  "--reports-dir", cli.tmp / "reports", "--no-progress")
    assert resumed.returncode == 1, resumed.stderr[-2000:]
    again = {(r["isolation"], r["residue"], r["phase"]): r for r in cli.records()}
    assert again[("fresh", 7, "self-hit")]["verdict"] == "diverged"
    assert again[("fresh", 7, "self-hit")]["confirms"] == "not ok on reset"
