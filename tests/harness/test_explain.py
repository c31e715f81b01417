"""``sweep explain`` end to end on the lab engine: real servers on 127.0.0.1 (the lab
model is copied under the test's tmp dir, so ``no_leftovers`` sees every server), the
README matrix's unpatched FULL run as the parent, the ladder read back from stdout, the
manifest link and the parent report's "Explained" section."""
from __future__ import annotations

import json
import re
import subprocess

import pytest

from tests.conftest import ROOT, fake_cmd

pytestmark = pytest.mark.usefixtures("no_leftovers")

FULL_UNPATCHED = ("--spec", "mtp", "--ctx", "huge", "--cudagraph", "FULL_AND_PIECEWISE",
                  "--patches", "none")


@pytest.fixture
def lab(cli):
    out = cli.tmp / "results"

    def sweep(*args: str) -> tuple[subprocess.CompletedProcess, str]:
        proc = cli.sweep(*FULL_UNPATCHED, "--slots", "2", *args, lab_model=True, timeout=240)
        run_id = re.search(r"run (\d{8}-\d{6}-[0-9a-f]{4})", proc.stderr)
        assert run_id, proc.stderr[-2000:]
        return proc, run_id.group(1)

    def explain(run_id: str, *args: str) -> subprocess.CompletedProcess:
        return cli("explain", run_id, "--out", out, "--slots", "2", *args, timeout=240)

    return sweep, explain, out


def closing(stdout: str) -> str:
    lines = closings(stdout)
    assert len(lines) == 1, stdout
    return lines[0]


def closings(stdout: str) -> list[str]:
    return [ln for ln in stdout.splitlines()
            if ln.startswith(("Reproduced", "Not reproduced", "Inconclusive"))]


def named(line: str, label: str) -> list[str]:
    """The axes a closing-line clause names (``label``: the clause's first words)."""
    m = re.search(re.escape(label) + r"[^:]*: ([^.]*)\.", line)
    assert m, (label, line)
    return [x.strip() for x in m.group(1).split(",")]


def ladder_rows(stdout: str) -> dict[str, str]:
    """The rows of the plain ladder table explain prints: label -> its one phase cell.
    Plain text (issue 36: explain printed markdown ``**`` to the terminal)."""
    assert "**" not in stdout and "|" not in stdout, stdout
    rows, table = {}, False
    for ln in stdout.splitlines():
        if ln.startswith("changed axis"):
            table = True
        elif table and not ln.strip():
            table = False
        elif table and not set(ln) <= {"-", " "}:
            cells = re.split(r"\s{2,}", ln.strip())
            if len(cells) == 2:
                rows[cells[0]] = cells[1]
    return rows


@pytest.mark.slow
def test_residue_4_of_the_unpatched_full_run(lab, tmp_path, cli):
    sweep, explain, out = lab
    # --context 3000: the prompt (3076 tokens) is not ≡ 4 mod the hybrid's 2048-token page,
    # so dropping the match unit moves the cut (at 4096 it would not: see the next test)
    proc, run_id = sweep("--residues", "3-5", "--context", "3000")
    assert proc.returncode == 1, proc.stderr[-2000:]
    ex = explain(run_id)
    assert ex.returncode == 0, ex.stderr[-3000:]
    rows = ladder_rows(ex.stdout)
    assert "Residue 4 of SPEC=mtp CTX=huge k=3 FULL_AND_PIECEWISE" in ex.stdout
    assert rows["none (the cell as run)"].startswith("empty")
    for clean in ("graph mode → PIECEWISE", "patches → all", "prefix caching → off",
                  "match unit → none"):
        assert re.fullmatch(r"\d+/\d+", rows[clean]), (clean, rows)
    assert rows["block size → 16"].startswith("empty")
    line = closing(ex.stdout)
    disc = named(line, "Discriminators")
    assert {"graph mode", "patches", "prefix caching", "match unit"} <= set(disc)
    assert named(line, "Not discriminators") == ["block size"]
    assert "runner → " not in ex.stdout and "runner (" not in line  # the lab has one runner

    # the linked run: same store, manifest names the parent and which rung ran where
    manifests = [json.loads(p.read_text()) for p in out.glob("*.manifest.json")]
    child = next(m for m in manifests if m.get("explains"))
    assert child["explains"]["run_id"] == run_id and child["isolation"] == "fresh"
    (target,) = child["explains"]["targets"]
    assert target["residue"] == 4 and target["phases"] == {"self-hit": "broken"}
    ran = {r["label"]: r.get("config_id") for r in target["rungs"]}
    assert len(set(ran.values())) == len(ran)   # every rung a configuration of its own
    child_recs = [json.loads(x) for x in (out / f"{child['run_id']}.jsonl").read_text().splitlines()]
    assert {r["config_id"] for r in child_recs} == set(ran.values())
    assert {r["residue"] for r in child_recs} == {4}

    report = cli("report", run_id, "--out", str(out))
    assert report.returncode == 0, report.stderr
    section = report.stdout.split("## Explained", 1)[1]
    assert "### Residue 4 of" in section and child["run_id"] in section
    assert "**Discriminators**" in section


@pytest.mark.slow
def test_a_rung_that_leaves_the_cut_in_place_is_named_neither(lab):
    sweep, explain, _ = lab
    # README's default --context 4096: 4100 tokens ≡ 4 mod 128 and mod 2048, so without a
    # match unit the hybrid page still leaves the 4-token tail
    proc, run_id = sweep("--residues", "4")
    assert proc.returncode == 1, proc.stderr[-2000:]
    ex = explain(run_id, "--residue", "4", "--phase", "self-hit")
    assert ex.returncode == 0, ex.stderr[-3000:]
    line = closing(ex.stdout)
    assert {"graph mode", "patches", "prefix caching"} <= set(named(line, "Discriminators"))
    assert named(line, "Not discriminators") == ["block size"]
    assert "match unit → none: the hit unit went 128 → 2048" in line
    assert "4-token tail" in line


@pytest.mark.slow
def test_a_cell_that_does_not_reproduce_is_not_explained(lab):
    sweep, explain, out = lab
    proc, run_id = sweep("--residues", "3", "--patches", "all")
    assert proc.returncode == 0, proc.stderr[-2000:]
    path = out / f"{run_id}.jsonl"
    recs = [json.loads(x) for x in path.read_text().splitlines()]
    for r in recs:   # a fake broken cell at a clean residue
        if r["phase"] == "self-hit":
            r.update(verdict="broken", reason="hand-edited", answer="")
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    ex = explain(run_id)
    assert ex.returncode == 0, ex.stderr[-3000:]
    line = closing(ex.stdout)
    assert line.startswith("Not reproduced: residue 3 self-hit came back self-hit ok")
    assert "no axis is named a discriminator" in line and "Discriminators" not in line


@pytest.mark.slow
def test_nothing_to_explain_and_bad_requests(lab):
    sweep, explain, _ = lab
    proc, run_id = sweep("--residues", "3", "--patches", "all")
    assert proc.returncode == 0
    ex = explain(run_id)
    assert ex.returncode == 0 and "nothing to explain" in ex.stderr and ex.stdout == ""
    ex = explain(run_id, "--residue", "3")
    assert ex.returncode == 2 and ex.stderr.count("\n") == 1 and "no non-ok cell" in ex.stderr
    ex = explain("no-such-run")
    assert ex.returncode == 2 and ex.stderr.count("\n") == 1


def test_a_committed_vllm_run_gets_its_rungs_and_the_other_runner(tmp_path, cli):
    """vLLM 0.26.0 on the H200 (reports/h200): MTP k = 3 residue 4 broken under
    FULL_AND_PIECEWISE; the server ran on V1, so the ladder adds V2 and nothing else
    changes in that rung's command but VLLM_USE_V2_MODEL_RUNNER. An ngram run's V2 rung
    is not run (vLLM refuses it, test_the_v2_runner_rung_is_not_run_for_ngram_on_vllm)."""
    run = ROOT / "reports" / "h200" / "results" / "20261201-092428-9128.jsonl.gz"
    if not run.is_file():
        pytest.skip("no committed H200 run")
    proc = cli("explain", str(run), "--dry-run", "--out", str(tmp_path))
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = {ln.split(":", 1)[0].strip(): ln.split(":", 1)[1] for ln in proc.stdout.splitlines()
             if ln.startswith("  ")}
    assert "runner → v2" in lines and "runner → v1" not in lines
    assert "VLLM_USE_V2_MODEL_RUNNER=1" in lines["runner → v2"]
    assert "VLLM_USE_V2_MODEL_RUNNER" not in lines["none (the cell as run)"]
    assert lines["runner → v2"].replace(" VLLM_USE_V2_MODEL_RUNNER=1", "") == \
        lines["none (the cell as run)"]
    assert "RESIDUE_LAB_PATCHES=all" in lines["patches → all"]
    assert '"cudagraph_mode":"PIECEWISE"' in lines["graph mode → PIECEWISE"]
    ngram = ROOT / "reports" / "h200" / "results" / "20261130-030446-b166.jsonl.gz"
    out = cli("explain", str(ngram), "--dry-run", "--out", str(tmp_path)).stdout
    assert "runner → v2: not run (vLLM's Model Runner V2 refuses n-gram" in out
    assert "nothing started" in proc.stdout and not list(tmp_path.glob("*.jsonl"))


# -- issue 23: nothing said on no evidence -------------------------------------------------
@pytest.mark.slow
def test_under_reference_cold_only_the_real_break_is_explained_and_its_axes_named(lab):
    # The cold cells are unjudged under --reference cold: nothing to explain there (they
    # printed "Reproduced" before), and the break's ladder names its discriminators.
    sweep, explain, _ = lab
    proc, run_id = sweep("--residues", "3-5", "--context", "3000", "--reference", "cold")
    assert proc.returncode == 1, proc.stderr[-2000:]
    ex = explain(run_id)
    assert ex.returncode == 0, ex.stderr[-3000:]
    assert "explaining 1 cell(s)" in ex.stderr
    line = closing(ex.stdout)
    assert line.startswith("Reproduced"), line
    assert {"graph mode", "patches", "prefix caching"} <= set(named(line, "Discriminators"))


@pytest.mark.slow
def test_under_reference_first_the_rungs_are_judged(lab):
    # Under first, a run's answers are judged only after it ends; a rung is one
    # configuration, so it is judged against the answer the parent's first configuration
    # gave at that prompt (before: every clean rung unjudged, no discriminator).
    sweep, explain, _ = lab
    proc, run_id = sweep("--residues", "4", "--reference", "first", "--context", "3000",
                         "--cudagraph", "PIECEWISE,FULL_AND_PIECEWISE")
    assert proc.returncode == 1, proc.stderr[-2000:]
    ex = explain(run_id)
    assert ex.returncode == 0, ex.stderr[-3000:]
    line = closing(ex.stdout)
    assert line.startswith("Reproduced"), line
    assert {"graph mode", "patches", "prefix caching"} <= set(named(line, "Discriminators"))
    assert "unjudged" not in ladder_rows(ex.stdout)["graph mode → PIECEWISE"]


@pytest.mark.slow
def test_one_ladder_per_document(lab, cli):
    # Residue 4 broken on documents 0 and 1: two cells, each ladder read from its own
    # document's reruns (a rung keyed by configuration and residue mixed the two).
    sweep, explain, out = lab
    proc, run_id = sweep("--residues", "4", "--seed", "0,1", "--context", "3000")
    assert proc.returncode == 1, proc.stderr[-2000:]
    ex = explain(run_id)
    assert ex.returncode == 0, ex.stderr[-3000:]
    assert "explaining 2 cell(s)" in ex.stderr
    heads = [ln for ln in ex.stdout.splitlines() if ln.startswith("Residue 4 of")]
    assert [h.endswith(f"(document {d})") for d, h in zip((0, 1), heads)] == [True, True], heads
    assert len(closings(ex.stdout)) == 2
    child = next(json.loads(p.read_text()) for p in out.glob("*.manifest.json")
                 if json.loads(p.read_text()).get("explains"))
    assert [t["document"] for t in child["explains"]["targets"]] == [0, 1]
    recs = [json.loads(x) for x in (out / f"{child['run_id']}.jsonl").read_text().splitlines()]
    n_rungs = len([r for r in child["explains"]["targets"][0]["rungs"] if r.get("config_id")])
    assert sorted({r["document_seed"] for r in recs}) == [0, 1]
    assert len({(r["config_id"], r["document_seed"]) for r in recs}) == 2 * n_rungs
    report = cli("report", run_id, "--out", out)
    section = report.stdout.split("## Explained", 1)[1]
    assert "(document 0)" in section and "(document 1)" in section


@pytest.mark.slow
def test_one_cell_per_prompt_case(lab):
    # examples/prompts/chat.jsonl: two cases, residue 4 broken in both
    sweep, explain, _ = lab
    proc, run_id = sweep("--residues", "4", "--prompts",
                         str(ROOT / "examples" / "prompts" / "chat.jsonl"))
    assert proc.returncode == 1, proc.stderr[-2000:]
    ex = explain(run_id, "--dry-run")
    assert ex.returncode == 0, ex.stderr[-3000:]
    heads = [ln for ln in ex.stdout.splitlines() if ln.startswith("residue 4 of")]
    assert len(heads) == 2, ex.stdout
    # one ladder per case (their order is the order the two points finished in)
    assert sorted(h.split(", case ")[1].split()[0] for h in heads) == \
        ["chat-incident", "chat-release-notes"], heads


@pytest.mark.slow
def test_a_run_made_with_auto_sample_is_explained(lab):
    sweep, explain, _ = lab
    proc, run_id = sweep("--residues", "4", "--isolation", "auto", "--auto-sample", "2")
    assert proc.returncode == 1, proc.stderr[-2000:]
    ex = explain(run_id, "--dry-run")
    assert ex.returncode == 0, ex.stderr[-3000:]
    assert "nothing started" in ex.stdout
    # auto adds document 1 for the rule's residues: one cell per document
    assert len([ln for ln in ex.stdout.splitlines() if ln.startswith("residue 4 of")]) == 2


@pytest.mark.slow
def test_explain_on_a_cold_machine_finishes(cli, tok_dir):
    # issue 23 item 10: every rung booting at once on a cold machine (a compile each,
    # sharing the CPU) timed out; explain boots one rung alone first (it warms the shared
    # cache, with a cold-compile timeout), then the rest a few at a time
    out = cli.tmp / "results"
    cache = cli.tmp / "cache"
    cmd = fake_cmd(tok_dir, "--break-residue", "4", "--compile-cache", str(cache),
                   "--cold-boot-s", "2", "--warm-boot-s", "0.2")
    proc = cli.sweep("--engine", "cmd", "--model", str(tok_dir), "--server-cmd", cmd,
                     "--context", "800", "--boot-timeout", "4", "--residues", "4", "--slots",
                     "1", rc=1)
    run_id = re.search(r"run (\d{8}-\d{6}-[0-9a-f]{4})", proc.stderr).group(1)
    for f in cache.iterdir():
        f.unlink()                                 # cold again: a new machine
    ex = cli("explain", run_id, "--out", out, "--slots", "8")
    assert ex.returncode == 0, ex.stderr[-3000:]
    rows = ladder_rows(ex.stdout)
    assert len(rows) >= 8 and not [k for k, v in rows.items() if "boot-fail" in v], rows


@pytest.mark.slow
def test_the_readmes_dflash_auto_run_plans(cli):
    # issue 23 item 9: explain refused any run made with --auto-sample; the committed
    # H200 DFlash run is the README's command (--isolation auto --auto-sample 2)
    run = ROOT / "reports" / "h200" / "results" / "20261201-115154-d70a.jsonl.gz"
    manifest = json.loads(run.with_name(run.name.replace(".jsonl.gz", ".manifest.json"))
                          .read_text())
    assert "--auto-sample" in manifest["command"]
    proc = cli("explain", run, "--dry-run", "--out", cli.tmp)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "rerun(s) on fresh servers; nothing started (--dry-run)." in proc.stdout
    assert "--auto-sample" not in proc.stdout   # the rungs are fresh: no auto flag


# -- 2026-12-02, found on the H200: explain on no evidence, and resuming a ladder ----------
def test_a_parent_with_no_answers_is_not_called_ok(lab):
    """Every parent server failed to boot (the cold H200 call with a 150 s boot timeout):
    explain said "every cell is ok, nothing to explain". It names what the cells are and
    exits 1, as the parent's own gate does."""
    sweep, explain, out = lab
    proc, run_id = sweep("--residues", "3", "--patches", "all")
    assert proc.returncode == 0, proc.stderr[-2000:]
    path = out / f"{run_id}.jsonl"
    recs = [json.loads(x) for x in path.read_text().splitlines()]
    for r in recs:   # as the H200's parent: every server timed out booting
        r.update(verdict="boot-fail", reason="server not ready within 150s", answer="")
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    ex = explain(run_id)
    assert ex.returncode == 1, ex.stderr[-2000:]
    assert "every cell is ok" not in ex.stderr and ex.stdout == ""
    assert "nothing explain can rerun: its not-ok cells are 2 boot-fail" in ex.stderr


@pytest.mark.slow
def test_an_interrupted_ladder_resumes_its_rungs(lab, cli):
    """The H200's explain run was cut at its budget with 9 of 10 rungs on disk and told the
    user `sweep --resume RUN`, which rebuilt the run from its options: one configuration,
    the unchanged rung only. Now the line names `sweep explain PARENT --resume RUN`, which
    rebuilds the ladder and runs only what is not on disk; `sweep --resume` of an explain
    run and a gzipped records file are refused in one line."""
    sweep, explain, out = lab
    proc, run_id = sweep("--residues", "4")
    assert proc.returncode == 1, proc.stderr[-2000:]
    ex = explain(run_id, "--residue", "4", "--phase", "self-hit")
    assert ex.returncode == 0, ex.stderr[-3000:]
    child = next(json.loads(p.read_text()) for p in out.glob("*.manifest.json")
                 if json.loads(p.read_text()).get("explains"))
    path = out / f"{child['run_id']}.jsonl"
    full = path.read_text().splitlines()
    configs = {json.loads(x)["config_id"] for x in full}
    assert len(configs) >= 5
    kept = [x for x in full if json.loads(x)["config_id"] in sorted(configs)[:2]]
    path.write_text("\n".join(kept) + "\n")          # as if cut after two rungs
    refused = cli("--resume", child["run_id"], "--out", str(out), timeout=60)
    assert refused.returncode == 2 and refused.stderr.count("\n") == 1, refused.stderr
    assert f"sweep explain {run_id} --resume {child['run_id']}" in refused.stderr
    other = explain(run_id, "--resume", child["run_id"], "--residue", "5")
    assert other.returncode == 2, other.stderr[-1000:]
    again = explain(run_id, "--resume", child["run_id"], "--residue", "4", "--phase",
                    "self-hit")
    assert again.returncode == 0, again.stderr[-3000:]
    assert "points already complete" in again.stderr
    recs = [json.loads(x) for x in path.read_text().splitlines()]
    assert {r["config_id"] for r in recs} == configs
    assert len(recs) == len(full)                    # the two kept rungs did not run again
    assert closing(again.stdout) == closing(ex.stdout)
    subprocess.run(["gzip", str(path)], check=True)
    gz = explain(run_id, "--resume", child["run_id"], "--residue", "4", "--phase", "self-hit")
    assert gz.returncode == 2 and gz.stderr.count("\n") == 1 and "gunzip" in gz.stderr


def test_the_block_rung_is_not_run_where_vllm_refuses_it(tmp_path, cli):
    """vLLM 0.26.0 on the H200 refused the hybrid's block-16 rung (a 160-token attention
    block is not divisible by --prefix-match-unit 128): on a vLLM hybrid with a match unit
    the rung says why it is not run; the lab's hybrid (which runs it) keeps it."""
    from engine.presets import resolve
    from harness.explain.plan import HYBRID_BLOCK_NOTE, axis_changes
    vllm = resolve("ngram", "huge", engine="vllm", model="/m", patches="none",
                   geometry="hybrid")
    block = {c[0]: c[2] for c in axis_changes(vllm)}["block size"]
    assert block == HYBRID_BLOCK_NOTE
    lab = resolve("ngram", "huge", engine="lab", patches="none", geometry="hybrid")
    assert {c[0]: c[2] for c in axis_changes(lab)}["block size"] == {"block_size": 16}


def test_the_v2_runner_rung_is_not_run_for_ngram_on_vllm():
    """vLLM 0.26.0 on the H200 refused both boots of the runner → v2 rung of an ngram cell
    ("Model Runner V2 does not yet support: ngram/ngram_gpu speculative decoding"): the rung
    says why it is not run instead of two boot-fails; MTP keeps it."""
    from engine.presets import resolve
    from harness.serve.engines import VllmAdapter
    from harness.explain.plan import V2_NGRAM_NOTE, axis_changes
    ngram = resolve("ngram", "huge", engine="vllm", model="/m")
    rungs = {c[1]: c[2] for c in axis_changes(ngram, runners=VllmAdapter.runners, ran_on="v1")}
    assert rungs["runner → v2"] == V2_NGRAM_NOTE
    mtp = resolve("mtp", "huge", engine="vllm", model="/m")
    rungs = {c[1]: c[2] for c in axis_changes(mtp, runners=VllmAdapter.runners, ran_on="v1")}
    assert rungs["runner → v2"] == {"runner": "v2"}
