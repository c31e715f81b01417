"""Issue 27 item 2 and issue 23 item 8: ``--resume`` checks the results file before it
trusts it, through the real entry point on the lab engine. A torn last line (a kill
mid-write) is cut off and said, and the phase it held runs again (nothing glued onto it,
no record lost); any other line that is not this run's record on this plan's
configurations is one line and exit 2, naming the line; the final count says how many
records were on disk and how many ran."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import env_without, one_line_exit_2, run_cli


def run(*args, cwd: Path, timeout: float = 180):
    """The CLI from ``cwd``, without the caller's GITHUB_* variables."""
    return run_cli(*args, cwd=cwd, timeout=timeout, env=env_without(prefix="GITHUB_"))



@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """A finished 3-residue lab run: (folder, run id, its records file's lines)."""
    tmp = tmp_path_factory.mktemp("resume")
    proc = run("--residues", "0-2", "--no-progress", "--out", tmp / "o", cwd=tmp)
    assert proc.returncode == 0, proc.stderr[-2000:]
    (path,) = (tmp / "o").glob("*.jsonl")
    return tmp, path.name[: -len(".jsonl")], path.read_text().splitlines(keepends=True)


def _copy(finished, tmp_path: Path, lines: list[str]) -> tuple[Path, str]:
    src, run_id, _ = finished
    out = tmp_path / "o"
    out.mkdir()
    (out / f"{run_id}.manifest.json").write_bytes(
        (src / "o" / f"{run_id}.manifest.json").read_bytes())
    (out / f"{run_id}.jsonl").write_text("".join(lines))
    return out, run_id


def test_a_torn_last_line_is_cut_off_said_and_rerun(finished, tmp_path):
    _, _, lines = finished
    torn = lines[:-1] + [lines[-1][: len(lines[-1]) // 2]]   # killed mid-write
    out, run_id = _copy(finished, tmp_path, torn)
    proc = run("--resume", run_id, "--out", out, "--no-progress", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    said = " ".join(proc.stderr.split())   # the terminal wraps a line naming a long path
    assert "last line was torn" in said and "cut off" in said
    recs = [json.loads(ln) for ln in (out / f"{run_id}.jsonl").read_text().splitlines()]
    assert len(recs) == len(lines)    # nothing glued, nothing lost: every cell once
    assert len({(r["residue"], r["phase"]) for r in recs}) == len(lines)
    assert all(r["verdict"] == "ok" for r in recs)
    # the last point lost a phase: it reran whole; the others were on disk
    assert f"; {len(lines) - 2} were on disk before --resume, 2 ran now" in proc.stderr
    report = run("report", out / f"{run_id}.jsonl", cwd=tmp_path)
    assert report.returncode == 0, report.stderr


def test_a_bad_line_in_the_middle_is_named(finished, tmp_path):
    _, _, lines = finished
    out, run_id = _copy(finished, tmp_path, lines[:2] + ["garbage\n"] + lines[2:])
    one_line_exit_2(run("--resume", run_id, "--out", out, cwd=tmp_path),
                    f"--resume {run_id}:", "line 3: not a record of this run", "not JSON")


def test_records_of_another_run_are_refused(finished, tmp_path):
    _, _, lines = finished
    other = [ln.replace(json.loads(ln)["run_id"], "20990101-000000-beef") for ln in lines]
    out, run_id = _copy(finished, tmp_path, lines + other)
    one_line_exit_2(run("--resume", run_id, "--out", out, cwd=tmp_path),
                    f"line {len(lines) + 1}: a record of run '20990101-000000-beef'")


def test_records_of_another_configuration_are_refused(finished, tmp_path):
    _, _, lines = finished
    rec = json.loads(lines[0])
    rec["config_id"] = "cfg-not-planned"
    out, run_id = _copy(finished, tmp_path, lines + [json.dumps(rec) + "\n"])
    one_line_exit_2(run("--resume", run_id, "--out", out, cwd=tmp_path),
                    f"line {len(lines) + 1}: configuration 'cfg-not-planned' is not in "
                    "this run's plan")


def test_resume_as_the_interrupt_message_spells_it_keeps_the_report_in_reports(finished, tmp_path):
    """Item 7: `sweep --resume RUN --out results` (the interrupt message's line) of a run
    that wrote to the default folders leaves the report in reports/."""
    src, run_id, lines = finished
    out = tmp_path / "results"
    out.mkdir()
    manifest = json.loads((src / "o" / f"{run_id}.manifest.json").read_text())
    manifest["command"] = "sweep --residues 0-2 --no-progress"
    manifest["options"]["flags"].update(out=None, reports_dir=None)   # the default folders
    (out / f"{run_id}.manifest.json").write_text(json.dumps(manifest))
    (out / f"{run_id}.jsonl").write_text("".join(lines[:-2]))
    proc = run("--resume", run_id, "--out", "results", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert (tmp_path / "reports" / f"{run_id}.md").is_file()
    assert not (out / f"{run_id}.md").exists()
