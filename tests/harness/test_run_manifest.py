"""The run manifest typed (``harness/records/manifest.py``): every committed manifest reads
and comes back exactly as read, a newer version is refused in one line, the driver writes a
``RunManifest``, and docs/records.md names every field."""
from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from harness.errors import StoreError
from harness.records.manifest import (MANIFEST_VERSION, RunManifest, as_manifest,
                                      manifest_fields, typed_manifests)
from harness.records.store import ResultStore, linked_runs, run_manifest_for

ROOT = Path(__file__).resolve().parents[2]


def committed_manifests() -> list[Path]:
    out = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True,
                         check=True).stdout.split()
    return [ROOT / f for f in out if f.endswith("manifest.json")]


def test_the_repository_has_manifests_to_check():
    paths = committed_manifests()
    assert len(paths) >= 60, paths   # reports/h200 and tests/reports/fixtures
    assert any("tests/reports/fixtures" in str(p) for p in paths)


@pytest.mark.parametrize("path", committed_manifests(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_committed_manifest_round_trips(path: Path, tmp_path: Path):
    d = json.loads(path.read_text())
    m = RunManifest.from_dict(d)
    back = m.as_dict()
    assert back == d and list(back) == list(d)          # values and key order
    assert "manifest_version" not in back or "manifest_version" in d   # nothing added
    assert m.manifest_version == int(d.get("manifest_version") or 1)
    assert as_manifest(back) == m
    if path.read_text() == json.dumps(d, indent=2, sort_keys=True):   # the store wrote it
        store = ResultStore(tmp_path, "r")
        store.write_manifest(m)
        assert store.manifest_path.read_text() == path.read_text()     # byte for byte


def test_an_old_manifest_reads_as_version_1_and_gains_only_what_is_set():
    old = {"run_id": "a", "command": "sweep --residues 3", "ended_at": None, "odd": [1]}
    m = RunManifest.from_dict(old)
    assert (m.manifest_version, m.command, m.extra, m.timing) == (1, old["command"], {"odd": [1]},
                                                                   None)
    assert m.as_dict() == old and list(m.as_dict()) == list(old)
    m.exit_code, m.ended_at = 0, "2026-12-01T00:00:00Z"
    assert list(m.as_dict()) == ["run_id", "command", "ended_at", "odd", "exit_code"]
    assert m.as_dict()["ended_at"] == "2026-12-01T00:00:00Z"


def test_a_new_manifest_carries_its_version_and_leaves_out_what_does_not_apply():
    m = RunManifest(run_id="b", ended_at=None, extra={"link": {"run_id": "p"}})
    d = m.as_dict()
    assert d["manifest_version"] == MANIFEST_VERSION and d["ended_at"] is None
    assert not {"options", "cache_dir", "auto_sample", "explains", "plan", "timing",
                "baseline"} & set(d)
    assert list(d)[-1] == "link" and m.link("link").run_id == "p"
    assert m.link("link").as_dict() == {"run_id": "p"} and m.link("nothing") is None
    assert RunManifest.from_dict(d).as_dict() == d


def test_a_newer_version_is_refused_in_one_line(tmp_path: Path):
    newer = {"run_id": "c", "manifest_version": MANIFEST_VERSION + 1}
    with pytest.raises(StoreError) as e:
        RunManifest.from_dict(newer, "x.manifest.json")
    assert "\n" not in str(e.value) and "newer than this harness reads" in str(e.value)
    assert "x.manifest.json" in str(e.value)
    with pytest.raises(StoreError):
        RunManifest.from_dict({"manifest_version": "two"})
    with pytest.raises(StoreError):
        RunManifest.from_dict(["not", "a", "manifest"])
    store = ResultStore(tmp_path, "c")
    store.manifest_path.write_text(json.dumps(newer))
    with pytest.raises(StoreError, match="newer than this harness reads"):
        store.read_manifest()
    (tmp_path / "c.jsonl").write_text("")
    with pytest.raises(StoreError, match="newer than this harness reads"):
        run_manifest_for(tmp_path / "c.jsonl")


def test_sweep_report_refuses_a_newer_manifest_with_exit_2(tmp_path: Path, capsys):
    from harness.command.cli import main
    fixture = ROOT / "tests/reports/fixtures/lab/fvp"
    recs = tmp_path / "fvp.jsonl"
    subprocess.run(f"gunzip -c {fixture}.jsonl.gz > {recs}", shell=True, check=True)
    d = json.loads(Path(f"{fixture}.manifest.json").read_text())
    d["manifest_version"] = MANIFEST_VERSION + 1
    (tmp_path / "fvp.manifest.json").write_text(json.dumps(d))
    with pytest.raises(SystemExit) as e:
        main(["report", str(recs)])
    err = capsys.readouterr().err
    assert e.value.code == 2 and err.count("\n") == 1 and "newer than this harness" in err, err


def test_readers_take_manifests_as_read_or_typed():
    d = {"run_id": "d", "residues": [3]}
    typed = typed_manifests([d, None, {}, RunManifest.from_dict(d)])
    assert [m.run_id for m in typed] == ["d", "d"] and typed[0] == typed[1]
    from harness.records.run_timing import RunTiming
    timing = {"timing": {"wall_s": 2.0, "points": 3}}
    assert RunTiming.of(timing) == RunManifest.from_dict(timing).timing
    assert RunTiming.of(timing).wall_s == 2.0 and RunTiming.of(None).wall_s is None


def test_linked_runs_are_typed(tmp_path: Path):
    (tmp_path / "p.jsonl").write_text("")
    (tmp_path / "p.manifest.json").write_text(json.dumps({"run_id": "p"}))
    (tmp_path / "x.jsonl").write_text("")
    (tmp_path / "x.manifest.json").write_text(json.dumps({"run_id": "x",
                                                          "explains": {"run_id": "p"}}))
    (tmp_path / "y.jsonl").write_text("")   # a newer manifest beside: not a link, no error
    (tmp_path / "y.manifest.json").write_text(json.dumps(
        {"run_id": "y", "manifest_version": MANIFEST_VERSION + 1, "explains": {"run_id": "p"}}))
    links = linked_runs([tmp_path / "p.jsonl"], "explains")
    assert [(m.run_id, p.name) for m, p in links] == [("x", "x.jsonl")]
    assert isinstance(links[0][0], RunManifest)


def test_the_driver_writes_a_run_manifest(tmp_path: Path):
    from harness.command.cli import build_options, sweep_parser
    from harness.run.driver import Driver
    from harness.run.plan import plan_points
    from harness.serve.engines import make_adapter

    argv = ["--residues", "3,4", "--phases", "cold,warm"]
    opts = build_options(sweep_parser().parse_args(argv), argv)
    adapter = make_adapter(opts.serving.engine, opts.serving.server_cmd)
    store = ResultStore(tmp_path, "run-m")
    driver = Driver(opts, adapter, store, plan_points(opts, adapter),
                    links={"explains": {"run_id": "parent"}})
    driver.start()
    assert isinstance(driver.manifest, RunManifest)
    on_disk = json.loads(store.manifest_path.read_text())
    assert on_disk == json.loads(json.dumps(driver.manifest.as_dict(), default=str))
    assert on_disk["manifest_version"] == MANIFEST_VERSION
    assert on_disk["explains"] == {"run_id": "parent"} and on_disk["ended_at"] is None
    assert on_disk["plan"]["points"] == 2 and "timing" not in on_disk
    driver.point_added(driver.plan.points[0])
    assert store.read_manifest().plan.points == 3
    m = driver.finish(wall=1.5, interrupted=False, backend={"backend": "local"})
    driver.set_exit_code(0)
    back = store.read_manifest()
    assert m is driver.manifest and isinstance(back, RunManifest)
    assert (back.exit_code, back.wall_s, back.backend.backend, back.interrupted) == (
        0, 1.5, "local", False)
    assert back.as_dict() == json.loads(store.manifest_path.read_text())


def test_docs_records_names_every_manifest_field():
    text = (ROOT / "docs/records.md").read_text()
    section = text[text.index("## Manifest"):text.index("## Reading a results file")]
    missing = [f.name for f in manifest_fields() if f"`{f.name}`" not in section]
    assert not missing, f"docs/records.md's Manifest section does not name: {missing}"
    assert f"`manifest_version` ({MANIFEST_VERSION}" in section


def test_the_baseline_blocks_still_broken_cells_are_typed_and_round_trip():
    """Issue 48's still-broken cells (their bytes, compared only under one compile) in the
    typed baseline block: read as ``StillBroken``, written back key for key in main's
    order; a block written before them gains nothing."""
    from harness.records.gate_block import BaselineBlock, StillBroken
    cell = {"config_id": "c1", "config_label": "k=3", "residue": 5, "phase": "cold",
            "old_verdict": "broken", "new_verdict": "broken", "bytes": "not_comparable",
            "why": "other compiles (a → b)"}
    d = {"source": "r1", "runs": ["r1"], "regressions": [], "losses": [],
         "still_broken": [cell], "allow_fewer": False, "judged_any": True, "passed": True}
    block = BaselineBlock.from_dict(d)
    assert block.still_broken == (StillBroken(**cell),)
    assert block.as_dict() == d and list(block.as_dict()) == list(d)
    new = BaselineBlock(source="r1", runs=["r1"], still_broken=(StillBroken(**cell),),
                        passed=True)
    assert list(new.as_dict()) == list(d) and new.as_dict()["still_broken"] == [cell]
    old = {k: v for k, v in d.items() if k != "still_broken"}
    assert BaselineBlock.from_dict(old).as_dict() == old
