"""Results as pandas DataFrames (``harness.results.frame``) and the several-run views of
``sweep compare`` built on it, against committed records (reports/h200/results archives,
the lab's gzipped fixtures)."""
from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import pandas as pd
import pytest

from harness.publish import compare
from harness.results import CONFIG_PREFIX, frame
from harness.records.store import StoreError, load_records, read_jsonl
from harness.names.phase import PHASES
from harness.names.verdict import SEVERITY

ROOT = Path(__file__).resolve().parents[2]
H200 = ROOT / "reports" / "h200" / "results"
# three runs of the k=3 hybrid: two on 30 Nov (one reset matrix, one fresh), one re-run
# later that day from a dirty tree: residue 4 cold is broken (patches=none) in the fresh ones
RESET, FRESH, RERUN = (H200 / f"{r}.jsonl.gz" for r in
                       ("20261130-024432-3b01", "20261130-024433-daa8",
                        "20261130-030446-b166"))
UNPATCHED_K3 = "SPEC=ngram CTX=huge k=3 FULL_AND_PIECEWISE block=128 unit=128 patches=none hybrid"


def test_one_row_per_phase_cell_with_the_configuration_flattened():
    df = frame(RESET, FRESH)
    assert len(df) == len(load_records([RESET, FRESH]))      # the latest record of each cell
    assert set(df["run_id"]) == {"20261130-024432-3b01", "20261130-024433-daa8"}
    for key in ("run_id", "config_id", "config_label", "document", "isolation", "residue",
                "phase", "verdict"):
        assert key in df.columns, key
    assert {"config.method", "config.draft_tokens", "config.cudagraph_mode",
            "config.patch_status.prefill-discriminator"} <= set(df.columns)
    assert "config.notes" not in df.columns      # prose, not configuration
    row = df[(df.config_label == UNPATCHED_K3) & (df.residue == 4) & (df.phase == "cold")]
    assert len(row) == 1
    r = row.iloc[0]
    assert (r.verdict, r.sha1[:12], r.isolation, r["config.draft_tokens"]) == \
        ("broken", "d09a0f59410e", "fresh", 3)
    assert r.cached_tokens == 0 and str(df["cached_tokens"].dtype) == "Int64"


def test_verdicts_phases_and_isolations_are_typed():
    df = frame(FRESH)
    assert isinstance(df["verdict"].dtype, pd.CategoricalDtype) and df["verdict"].cat.ordered
    assert list(df["verdict"].cat.categories) == list(SEVERITY)
    assert list(df["phase"].cat.categories) == list(PHASES)
    assert isinstance(df["isolation"].dtype, pd.CategoricalDtype)
    # ordered worst first: the minimum of a group is its worst verdict
    worst = df.groupby("config_label", observed=True)["verdict"].min()
    assert worst[UNPATCHED_K3] == "broken"
    assert (df.groupby("residue")["verdict"].min()[5]) == "ok"


def test_a_folder_a_run_id_and_a_plain_file_read_the_same(tmp_path):
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "20261130-024433-daa8.jsonl").write_bytes(gzip.decompress(FRESH.read_bytes()))
    by_file = frame(FRESH)
    by_id = frame("20261130-024433-daa8", out_dir=plain)
    by_folder = frame(plain)
    by_records = frame(records=read_jsonl(FRESH))
    for other in (by_id, by_folder, by_records):
        pd.testing.assert_frame_equal(by_file, other)


@pytest.fixture(scope="module")
def archive():
    """Every archive of reports/h200/results (~20,000 records: ~20 s on a 2-core box),
    read once for the tests that need it."""
    return frame(H200)


@pytest.mark.slow
def test_the_whole_committed_archive_frames(archive):
    """Every archive of reports/h200/results, 52 runs of several schema versions."""
    df = archive
    assert df["run_id"].nunique() == len(list(H200.glob("*.jsonl.gz")))
    assert df["verdict"].isna().sum() == 0 and df["phase"].isna().sum() == 0
    assert (df["config.engine"] == "vllm").all()


def test_a_bad_source_is_a_store_error_naming_it(tmp_path):
    with pytest.raises(StoreError, match="no results files"):
        frame(tmp_path)
    junk = tmp_path / "junk.jsonl"
    junk.write_text("not json\n")
    with pytest.raises(StoreError, match="line 1"):
        frame(junk)


def test_a_trend_lists_the_cells_that_differ_or_are_not_ok():
    df = frame(RESET, FRESH, RERUN)
    assert compare.run_order(df) == ["20261130-024432-3b01", "20261130-024433-daa8",
                                     "20261130-030446-b166"]
    wide = compare.trend_frame(df)
    cold4 = wide[(wide.config_label == UNPATCHED_K3) & (wide.residue == 4)
                 & (wide.phase == "cold")]
    assert len(cold4) == 1
    assert list(cold4.iloc[0][-3:].fillna("–")) == ["–", "broken d09a0f59410e",
                                                    "broken d09a0f59410e"]
    assert len(compare.trend_frame(df, changed_only=False)) > len(wide)
    # a cell ok in every run that measured it is left out of the changed view
    assert not any(set(r[5:].dropna()) == {"ok"} for _, r in wide.iterrows())


@pytest.mark.slow
def test_one_cell_across_builds(archive):
    hist = compare.cell_history(archive, residue=4, phase="cold", config=UNPATCHED_K3,
                                document=0)
    assert len(hist) >= 10 and set(hist["config_label"]) == {UNPATCHED_K3}
    assert hist["harness_version"].nunique() > 2          # several builds of the harness
    fresh = hist[hist.isolation == "fresh"]
    # the fresh server's answer at the rule's cell: broken d09a0f59410e, from the first
    # build on (every fresh record on this machine layout but one, which diverged)
    assert (fresh["verdict"].astype(str).isin(["broken", "diverged"])).all()
    assert (fresh["sha1"] == "d09a0f59410e").sum() >= 5
    md = compare.render_history_markdown(hist)
    assert md.count("\n| 2026") == len(hist) and "d09a0f59410e" in md


def _regressed_copy(src: Path, dest: Path, run_id: str) -> Path:
    """``src`` as a later run in which one ok cell is broken."""
    recs = read_jsonl(src)
    hit = next(r for r in recs if r["verdict"] == "ok")
    for r in recs:
        r["run_id"] = run_id
        r["started_at"] = "2027-01-01T00:00:00+00:00"
    hit.update(verdict="broken", sha1="0" * 40)
    dest.write_text("".join(json.dumps(r) + "\n" for r in recs))
    return dest


@pytest.mark.slow
def test_sweep_compare_over_several_runs(tmp_path, cli):
    runs = tmp_path / "runs"
    runs.mkdir()
    for f in (RESET, FRESH, RERUN):
        shutil.copy(f, runs)
    proc = cli("compare", runs)
    assert proc.returncode == 0, proc.stderr
    assert "# Sweep trend: 3 runs" in proc.stdout and "broken d09a0f59410e" in proc.stdout
    late = _regressed_copy(FRESH, tmp_path / "late.jsonl", "20270101-000000-beef")
    proc = cli("compare", RESET, FRESH, late, "--json")
    assert proc.returncode == 1, proc.stderr     # the newest run regressed against the one before
    rows = json.loads(proc.stdout)
    assert any(r.get("20270101-000000-beef", "").startswith("broken 000000000000")
               for r in rows)
    proc = cli("compare", runs, "--residue", "4", "--phase", "cold", "--config",
               "k=3 FULL_AND_PIECEWISE block=128 unit=128 patches=none")
    assert proc.returncode == 0, proc.stderr
    assert "# Cell history" in proc.stdout and proc.stdout.count("d09a0f59410e") == 2
    one = cli("compare", runs)
    assert one.returncode == 0
    alone = cli("compare", FRESH)
    assert alone.returncode == 2 and "give two runs or more" in alone.stderr
    assert len(alone.stderr.strip().splitlines()) == 1
