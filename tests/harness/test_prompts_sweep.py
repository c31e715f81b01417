"""--prompts FILE end to end on the lab engine: real servers on 127.0.0.1 through the real
CLI, every /tokenize count checked from the records (issue 16's 'done when')."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest

from harness.publish.compare import compare_records
from tests.conftest import ROOT, read_jsonl
from tests.reports.gfm import gfm_html, gfm_tables

pytestmark = pytest.mark.usefixtures("no_leftovers")

CHAT = ROOT / "examples" / "prompts" / "chat.jsonl"
CODE = ROOT / "examples" / "prompts" / "code.jsonl"
BROKEN = ("--cudagraph", "FULL_AND_PIECEWISE", "--patches", "none")


def sweep(cli, *args: str, out: str = "results", rc: int | None = 0,
          timeout: float = 600, local_tokenizer: bool = True
          ) -> tuple[subprocess.CompletedProcess, list[dict], dict]:
    """A lab sweep on 2 slots through ``cli`` (``--model`` this test's copy of the lab
    model unless ``local_tokenizer`` is False): its process, and the records and manifest
    of the results file it added to ``out`` (none: ``[]``, ``{}``)."""
    outdir = cli.tmp / out
    before = set(outdir.glob("*.jsonl")) if outdir.exists() else set()
    proc = cli.sweep("--slots", "2", *args, out=out, lab_model=local_tokenizer, rc=rc,
                     timeout=timeout)
    new = sorted(set(outdir.glob("*.jsonl")) - before) if outdir.exists() else []
    if not new:
        return proc, [], {}
    mpath = new[-1].with_name(new[-1].name.replace(".jsonl", ".manifest.json"))
    return proc, read_jsonl(new[-1]), (json.loads(mpath.read_text()) if mpath.exists() else {})


@pytest.mark.slow
def test_system_prompt_three_turns_padded_middle_message_sweeps_all_128_residues_exactly(tmp_path, cli):
    case = json.loads(CHAT.read_text().splitlines()[0])
    roles = [m["role"] for m in case["messages"]]
    assert roles[0] == "system" and roles.count("user") == 3 and case["pad"] == "user:1"
    # The claim is the padding's (every residue's prompt counted by the server and hit
    # exactly), not isolation's: each point runs on a server returned to its just-booted
    # state, each restore proven (asserted below), instead of booting 128 (e2e/ does that).
    proc, recs, manifest = sweep(cli, "--prompts", str(CHAT), "--case", case["id"],
                                 "--residues", "all", "--isolation", "restore",
                                 "--poison", "off")   # the sleep cycle's steps, below
    facts = manifest["prompts"]["cases"][case["id"]]
    assert facts["pad"] == "messages[3] (user)"   # the middle user turn, not the last
    assert 0 < 3 < len(roles) - 1
    assert len(recs) == 128 * 2
    assert {r["case_id"] for r in recs} == {case["id"]}
    for r in recs:   # every templated length was counted by the server and hit exactly
        assert r["templated_len_source"] == "server /tokenize", r
        assert r["templated_len"] == r["target_len"] == r["prompt_tokens"], r
        assert r["target_len"] % 128 == r["residue"]
        assert r["verdict"] == "ok" and r["answer"] == case["expected"], r
    assert sorted(r["residue"] for r in recs if r["phase"] == "cold") == list(range(128))
    assert all(r["cached_tokens"] == 0 for r in recs if r["phase"] == "cold")
    assert all(r["cached_tokens"] > 0 for r in recs if r["phase"] == "self-hit")
    assert len({r["prompt_sha1"] for r in recs}) == 128
    restored = [r["restore"] for r in recs if r["phase"] == "cold"]   # two slots: two boots
    assert [p["means"] for p in restored].count("boot") in (1, 2)
    assert all(set(p["steps"]) == {"sleep", "is_sleeping", "wake_up", "is_awake", "reset"}
               for p in restored if p["means"] != "boot")
    report = next((tmp_path / "reports").glob("*.md")).read_text()
    assert f"### Case `{case['id']}`" in report and "128 clean" in report


@pytest.mark.slow
def test_both_example_sets_break_exactly_at_the_rule_residue_on_the_unpatched_lab(tmp_path, cli):
    cases = {}
    for path in (CHAT, CODE):
        proc, recs, _ = sweep(cli, "--prompts", str(path), "--residues", "3-5", *BROKEN,
                              rc=1)
        ids = [json.loads(line)["id"] for line in path.read_text().splitlines()]
        assert sorted({r["case_id"] for r in recs}) == sorted(ids)
        for r in recs:
            cases[(r["case_id"], r["residue"], r["phase"])] = r
            assert r["templated_len"] == r["target_len"] == r["prompt_tokens"]
    bad = {k for k, r in cases.items() if r["verdict"] != "ok"}
    assert bad == {(c, 4, "self-hit") for c, _, _ in cases}   # residue 4 = k + 1, every case
    assert all(cases[k]["verdict"] == "broken" and cases[k]["computed_tail"] == 4 for k in bad)
    report = sorted((tmp_path / "reports").glob("*.md"))[-1].read_text()
    html = gfm_html(report)   # as GitHub renders it: a heading and a table per case
    tables = gfm_tables(report)
    for c in sorted({c for c, _, _ in cases if c.startswith("code-")}):
        assert f"<h3>Case <code>{c}</code></h3>" in html
        assert f"Non-ok cells of case <code>{c}</code>" in html
        assert f"`SPEC=mtp CTX=huge k=3 FULL_AND_PIECEWISE block=128 unit=128 patches=none` · case `{c}`: 2 clean, 1 broken: residue 4" in report
    results = [t for t in tables if t["head"][1:] == ["cold", "self-hit"]]
    assert len(results) == 2
    for t in results:
        assert [row[0] for row in t["rows"]] == ["residue 3", "residue 4", "residue 5"]
        assert t["rows"][1][2].startswith("empty, stop")


@pytest.mark.slow
def test_resume_reruns_only_the_missing_case_points(tmp_path, cli):
    _, recs, manifest = sweep(cli, "--prompts", str(CODE), "--residues", "7,8",
                              "--no-prefix-cache", "--phases", "cold")
    assert len(recs) == 4
    path = tmp_path / "results" / f"{manifest['run_id']}.jsonl"
    lines = path.read_text().splitlines()
    dropped = json.loads(lines[-1])
    path.write_text("\n".join(lines[:-1]) + "\n")   # as if cut off before the last point
    kept = {(r["case_id"], r["residue"]): r["started_at"] for r in map(json.loads, lines[:-1])}
    proc, _, _ = sweep(cli, "--resume", manifest["run_id"])
    assert "3 points already complete, 1 to run" in proc.stderr
    after = [json.loads(line) for line in path.read_text().splitlines()]
    assert len(after) == 4
    assert {(r["case_id"], r["residue"]) for r in after} == {(c, n) for c, n in kept} | {
        (dropped["case_id"], dropped["residue"])}
    assert all(kept[(r["case_id"], r["residue"])] == r["started_at"]
               for r in after if (r["case_id"], r["residue"]) in kept)



@pytest.mark.slow
def test_resume_refuses_a_prompt_file_that_changed(tmp_path, cli):
    cases = tmp_path / "cases.jsonl"
    shutil.copy(CODE, cases)
    _, recs, manifest = sweep(cli, "--prompts", str(cases), "--residues", "7",
                              "--no-prefix-cache", "--phases", "cold")
    path = tmp_path / "results" / f"{manifest['run_id']}.jsonl"
    before = path.read_text()
    rows = [json.loads(line) for line in CODE.read_text().splitlines()]
    rows[1]["messages"][-1]["content"] += "\nOne more line."
    cases.write_text("".join(json.dumps(r) + "\n" for r in rows))
    proc, _, _ = sweep(cli, "--resume", manifest["run_id"], rc=2)
    line, = proc.stderr.strip().splitlines()
    assert "case 'code-rust-review'" in line and "changed since the run started" in line
    assert path.read_text() == before   # nothing on disk was touched


@pytest.mark.slow
def test_cases_without_expected_judged_by_cold_and_by_a_golden_run_keyed_by_case(tmp_path, cli):
    bare = tmp_path / "bare.jsonl"
    rows = [json.loads(line) for line in CODE.read_text().splitlines()]
    bare.write_text("".join(json.dumps({k: v for k, v in r.items() if k != "expected"}) + "\n"
                            for r in rows))
    _, golden, gm = sweep(cli, "--prompts", str(CODE), "--residues", "2", out="g")
    # cold: the hit is judged against the cold answer (the cold phase itself is unjudged,
    # never ok: it is the reference, and the judged hits decide the exit code, issue 36)
    _, recs, _ = sweep(cli, "--prompts", str(bare), "--residues", "2", "--reference",
                       "cold", out="g", rc=0)
    cold = {r["case_id"]: r["sha1"] for r in recs if r["phase"] == "cold"}
    assert {r["verdict"] for r in recs if r["phase"] == "cold"} == {"unjudged"}
    for r in recs:
        if r["phase"] == "self-hit":
            assert r["verdict"] == "ok" and r["reference_sha1"] == cold[r["case_id"]]
    # golden: every answer against the golden run's answer to the same prompt
    _, recs, _ = sweep(cli, "--prompts", str(bare), "--residues", "2", "--reference",
                       f"golden:{gm['run_id']}", out="g")
    want = {(r["prompt_sha1"], r["phase"]): r["sha1"] for r in golden}
    assert len(recs) == 4
    for r in recs:
        assert r["verdict"] == "ok" and r["reference_sha1"] == want[(r["prompt_sha1"], r["phase"])]
    # a prompt the golden run never answered has no reference: exit 2 before any point runs
    proc, recs, _ = sweep(cli, "--prompts", str(bare), "--residues", "3", "--reference",
                          f"golden:{gm['run_id']}", out="g", rc=2)
    assert recs == [] and "no ok answer for case 'code-python-retry' residue 3" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def test_compare_and_junit_name_the_case(tmp_path, cli):
    _, recs, _ = sweep(cli, "--prompts", str(CHAT), "--residues", "4", "--junit",
                       str(tmp_path / "j.xml"))
    worse = [dict(r, verdict="broken") if r["case_id"] == "chat-incident"
             and r["phase"] == "self-hit" else r for r in recs]
    result = compare_records(recs, worse).as_dict()
    assert [(g["config_label"].split(" · ")[-1], g["residue"]) for g in result["regressions"]] \
        == [("case chat-incident", 4)]
    labels = {c["config_label"].split(" · ")[-1]: c["counts"] for c in result["configs"]}
    assert labels["case chat-release-notes"]["unchanged_ok"] == 1
    xml = (tmp_path / "j.xml").read_text()
    assert "case chat-incident residue 4 self-hit" in xml
    assert "case chat-release-notes residue 4 cold" in xml


def test_the_lab_echoes_a_question_it_cannot_answer_and_cold_judges_the_hit(tmp_path, cli):
    """docs/prompts.md: without a 'first N lines' instruction the lab echoes the last user
    message; it never answers the question (an `expected` real answer would be diverged)."""
    question = "Which of our regions had the most failed deploys last week, and why?"
    path = tmp_path / "q.jsonl"
    path.write_text(json.dumps({"id": "question", "pad": "system", "messages": [
        {"role": "system", "content": "You are an operations assistant. " * 30},
        {"role": "user", "content": question}]}) + "\n")
    # the cold phase is unjudged under --reference cold, the reference the hit is judged
    # against: the judged hit decides the exit code (issue 36: this exited 1)
    _, recs, _ = sweep(cli, "--prompts", str(path), "--residues", "9", "--reference", "cold",
                       rc=0)
    assert [r["answer"] for r in recs] == [question, question]
    assert recs[0]["phase"] == "cold" and recs[0]["verdict"] == "unjudged"
    hit = next(r for r in recs if r["phase"] == "self-hit")
    assert hit["verdict"] == "ok" and hit["reference_sha1"] == recs[0]["sha1"]


@pytest.mark.slow
def test_without_a_local_tokenizer_cases_are_planned_on_a_probe_servers_tokenize(tmp_path, cli):
    """--engine cmd with no tokenizer.json: every case prompt is counted by a probe
    server's /tokenize; a case its template refuses is exit 2 naming the case, before any
    data point runs, and the probe is stopped."""
    server = (f"{sys.executable} -m engine.lab --host 127.0.0.1 --port {{port}} --model {cli.lab_model()} "
              "--enable-prefix-caching --prefix-match-unit 128 --block-size 128 "
              "--enable-prompt-tokens-details")
    _, recs, manifest = sweep(cli, "--engine", "cmd", "--server-cmd", server,
                              "--prompts", str(CODE), "--residues", "6",
                              local_tokenizer=False)
    assert len(recs) == 4 and all(r["verdict"] == "ok" for r in recs)
    assert all(r["templated_len"] == r["target_len"] == r["prompt_tokens"] for r in recs)
    assert manifest["prompts"]["cases"]["code-rust-review"]["pad"] == "messages[2] (assistant)"
    assert any("-probe-" in p.name for p in (tmp_path / "results").rglob("*.log"))
    bad = tmp_path / "image.jsonl"
    bad.write_text(json.dumps({"id": "pic", "expected": "x", "messages": [
        {"role": "system", "content": "Look. " * 200},
        {"role": "user", "content": [{"type": "text", "text": "What is this?"},
                                     {"type": "image_url", "image_url": {"url": "x"}}]}]}) + "\n")
    proc, recs, _ = sweep(cli, "--engine", "cmd", "--server-cmd", server, "--prompts",
                          str(bad), "--residues", "6", out="bad", rc=2,
                          local_tokenizer=False)
    assert recs == []
    line, = proc.stderr.strip().splitlines()
    assert "case 'pic' (line 1): the server's /tokenize refused the messages" in line, line


def test_a_case_without_expected_on_a_server_that_does_not_boot_is_boot_fail(tmp_path, cli):
    bare = tmp_path / "bare.jsonl"
    row = json.loads(CODE.read_text().splitlines()[0])
    row.pop("expected")
    bare.write_text(json.dumps(row) + "\n")
    _, recs, _ = sweep(cli, "--prompts", str(bare), "--residues", "1", "--reference",
                       # one KV block, far from max_model_len: the server boots and fails
                       # (4096 bytes, not one block, is refused up front: issue 50)
                       "cold", "--kv-cache-memory-bytes", "4000000", rc=1)
    assert [(r["case_id"], r["verdict"]) for r in recs] == [(row["id"], "boot-fail")] * 2
    assert recs[0]["expected_chars"] == 0 and "KV cache" in recs[0]["reason"]
