"""Documents as an axis (``--seed 0,1,2``): one record per residue, phase and document;
cells count bad documents; resume, golden answers and compare key by document. And the
pre-imported launcher on the lab: forked servers, records that say so, nothing left."""
from __future__ import annotations

import json
from collections import Counter
from types import SimpleNamespace

import pytest

from harness.publish.compare import compare_records
from harness.run.golden import golden_answer, load_golden
from tests.conftest import ROOT, read_jsonl

pytestmark = pytest.mark.usefixtures("no_leftovers")

LAB = ("--spec", "mtp", "--ctx", "huge", "--cudagraph", "FULL", "--patches", "none",
       "--context", "1200")


def sweep(cli, *args: str, timeout: float = 300):
    """A lab sweep through ``cli``; its process and its results folder."""
    return cli.sweep(*args, lab_model=True, timeout=timeout), cli.tmp / "results"


@pytest.mark.slow
def test_three_documents_one_record_each_and_bad_documents_counted(tmp_path, cli):
    proc, out = sweep(cli, *LAB, "--residues", "3-5", "--seed", "0,1,2", "--slots", "2")
    assert proc.returncode == 1, proc.stderr[-2000:]
    recs = read_jsonl(next(out.glob("*.jsonl")))
    keys = Counter((r["residue"], r["phase"], r["document_seed"]) for r in recs)
    assert set(keys) == {(res, ph, d) for res in (3, 4, 5) for ph in ("cold", "self-hit")
                         for d in (0, 1, 2)}
    assert set(keys.values()) == {1}
    for r in recs:   # each rerun spells its own document
        assert f"--seed {r['document_seed']} " in r["rerun"] + " "
    docs = {r["document_seed"]: r for r in recs if r["residue"] == 3 and r["phase"] == "cold"}
    assert len({r["answer"] for r in docs.values()}) == 3   # three different documents
    report = next((tmp_path / "reports").glob("*.md")).read_text()
    assert "**empty, `stop`, 3/3 documents** †1" in report
    assert "ok, 3 documents" in report and "seeds 0, 1, 2" in report
    manifest = json.loads(next(out.glob("*.manifest.json")).read_text())
    assert manifest["documents"] == [0, 1, 2]


@pytest.mark.slow
def test_resume_keys_by_document(tmp_path, cli):
    proc, out = sweep(cli, *LAB, "--residues", "3-4", "--seed", "0,1", "--slots", "1")
    path = next(out.glob("*.jsonl"))
    run_id = path.name.removesuffix(".jsonl")
    recs = read_jsonl(path)
    # cut off residue 4 of document 1 half-way (its self-hit phase is lost)
    keep = [r for r in recs if not (r["residue"] == 4 and r["document_seed"] == 1
                                    and r["phase"] == "self-hit")]
    path.write_text("".join(json.dumps(r) + "\n" for r in keep))
    proc, _ = sweep(cli, "--resume", run_id)
    assert "2 points already complete" not in proc.stderr   # 3 of 4 points are complete
    assert "3 points already complete, 1 to run" in proc.stderr, proc.stderr[-2000:]
    after = read_jsonl(path)
    assert Counter((r["residue"], r["phase"], r["document_seed"]) for r in after) == Counter(
        (r["residue"], r["phase"], r["document_seed"]) for r in recs)


def _rec(residue, doc, sha, verdict="ok", phase="cold", target=1156):
    return {"run_id": "r", "config_id": "c", "config_label": "L", "residue": residue,
            "phase": phase, "verdict": verdict, "sha1": sha, "target_len": target,
            "answer": f"answer {sha}", "document_seed": doc,
            "started_at": "2026-12-01T00:00:00+00:00"}


def _point(residue, target, seed):
    plan = SimpleNamespace(prompt_sha1=None, target_len=target)
    return SimpleNamespace(residue=residue, plan=plan, document_seed=seed, case=None)


def test_golden_answers_are_per_document(tmp_path):
    f = tmp_path / "gold.jsonl"
    f.write_text("".join(json.dumps(r) + "\n" for r in (
        _rec(4, 0, "aaa"), _rec(4, 1, "bbb"))))
    gold = load_golden(str(f), tmp_path)
    assert golden_answer(gold, _point(4, 1156, 0))["text"] == "answer aaa"
    assert golden_answer(gold, _point(4, 1156, 1))["text"] == "answer bbb"
    assert golden_answer(gold, _point(4, 1156, 2)) is None
    # a reference run written before documents were an axis answers every document
    old = tmp_path / "old.jsonl"
    rec = _rec(4, None, "ccc")
    del rec["document_seed"]
    old.write_text(json.dumps(rec) + "\n")
    assert golden_answer(load_golden(str(old), tmp_path), _point(4, 1156, 1))["text"] == \
        "answer ccc"


def test_compare_keys_by_document():
    old = [_rec(4, 0, "a"), _rec(4, 1, "b")]
    new = [_rec(4, 0, "a"), _rec(4, 1, "x", verdict="broken")]
    res = compare_records(old, new).as_dict()
    assert res["regressed"] == 1 and res["regressions"][0]["document"] == 1
    statuses = {(p["residue"], p["document"]): p["status"] for p in res["configs"][0]["points"]}
    assert statuses == {(4, 0): "unchanged_ok", (4, 1): "regressed"}


@pytest.mark.parametrize("value,why", [("0,x", "is not an integer"), ("1,1", "named twice"),
                                       ("-1", "at least 0")])
def test_bad_seed_lists_are_usage_errors(tmp_path, value, why, cli):
    proc, _ = sweep(cli, "--seed", value, "--dry-run")
    assert proc.returncode == 2 and why in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.slow
def test_prefork_launcher_forks_lab_servers_and_leaves_nothing(tmp_path, cli):
    proc, out = sweep(cli, *LAB, "--residues", "3-5", "--launcher", "prefork",
                      "--slots", "2")
    assert proc.returncode == 1, proc.stderr[-2000:]
    assert "launcher prefork: fork server up" in proc.stderr
    recs = read_jsonl(next(out.glob("*.jsonl")))
    assert {r["server_boot"]["launcher"] for r in recs} == {"forked"}
    bad = {(r["residue"], r["phase"]) for r in recs if r["verdict"] != "ok"}
    assert bad == {(4, "self-hit")}          # the same verdicts as a plain boot
    manifest = json.loads(next(out.glob("*.manifest.json")).read_text())
    assert manifest["backend"]["fork_server"] is True
    assert manifest["backend"]["not_preloaded_cuda"] == []   # the lab touches no CUDA
    assert manifest["timing"]["boot_split"]["launchers"] == {"forked": 3}


def test_cache_dir_is_for_vllm(tmp_path, cli):
    proc, _ = sweep(cli, "--cache-dir", str(tmp_path / "c"), "--dry-run")
    assert proc.returncode == 2 and "--cache-dir is for --engine vllm" in proc.stderr


def test_one_key_for_case_document_and_auto_pass():
    from harness.records.phase_record import PhaseRecord
    from harness.records.recordkeys import cell_key, point_key
    old = {"config_id": "c", "residue": 4, "phase": "cold"}   # before cases and documents
    read = PhaseRecord.from_dict
    assert cell_key(read(old)) == ("c", None, 4, "cold", 0, None)
    assert point_key(read(old)) == ("c", None, 4, 0, "")
    new = dict(old, case_id="q", document_seed=1, isolation="fresh", isolation_run="auto")
    assert cell_key(read(new)) == ("c", "q", 4, "cold", 1, "fresh")
    assert point_key(read(new)) == ("c", "q", 4, 1, "fresh")
    assert point_key(read(dict(old, rerun="sweep --seed 2 --residues 4"))) == (
        "c", None, 4, 2, "")


def test_consensus_is_taken_per_document():
    from harness.run.matrix_reference import rejudge
    recs = [dict(_rec(r, doc, f"d{doc}", verdict="unjudged"), answer=f"document {doc}",
                 phase=phase)
            for doc in (0, 1) for r in (1, 2, 3) for phase in ("cold", "self-hit")]
    from harness.records.phase_record import PhaseRecord
    out = rejudge([PhaseRecord.from_dict(r) for r in recs], "consensus", ["c"])
    assert {r.verdict for r in out} == {"ok"}


def test_a_seed_list_with_a_prompt_set_is_a_usage_error(cli):
    proc = cli("--prompts", ROOT / "examples/prompts/code.jsonl", "--seed", "0,1", "--dry-run",
               timeout=120)
    assert proc.returncode == 2 and "--seed lists are documents" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
