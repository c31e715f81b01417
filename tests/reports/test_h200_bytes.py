"""Issue 48's one-H200 experiment (reports/h200/bytes/README.md), its claims checked against
the records and the file lists that came back. The README's answer table is parsed and each
row compared with the records of its servers; if a claim changes, its check changes with it."""
from __future__ import annotations

import io
import json
import re
import sys
import tarfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))
from gpu_bytes_summary import load, servers  # noqa: E402

HERE = ROOT / "reports" / "h200" / "bytes"
README = (HERE / "README.md").read_text()
# the answer table's columns: (k, residue, phase)
COLUMNS = [(4, 5, "cold"), (4, 5, "self-hit"), (4, 4, "reset-cold"), (3, 4, "cold"),
           (3, 4, "self-hit")]


@pytest.fixture(scope="module")
def records():
    return load([HERE / "records-h200a.jsonl.gz"])


@pytest.fixture(scope="module")
def srv(records):
    return servers(records)


def _answer_rows() -> list[list[str]]:
    part = README.split("## What it answers")[1].split("\n\n")[1]
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in part.splitlines()]
    return [r for r in rows if r[0].startswith("k")]


def _cell_text(s: dict, residue: int, phase: str) -> str:
    ok, sha = s["cells"][(residue, phase)]
    return f"{'ok' if ok else 'not ok'} `{sha}`"


def test_the_answer_table_is_what_each_group_of_servers_gave(srv):
    rows = _answer_rows()
    assert len(rows) == 4
    for name, fps, *cells in rows:
        m = re.fullmatch(r"(k\d-(?:own|pin))(?: ×(\d))?", name)
        group = [s for n, s in srv.items() if n.startswith(m[1]) and s["cells"]]
        assert len(group) == int(m[2] or 1), name
        assert len({s["fingerprint"] for s in group}) == int(fps), name
        for (k, residue, phase), text in zip(COLUMNS, cells):
            if text == "–":
                assert all(s["k"] != k for s in group), (name, residue, phase)
                continue
            assert {_cell_text(s, residue, phase) for s in group} == {text}, (name, phase)


def test_one_h200_every_server_a_compile_miss_and_the_copies_never_ran(srv, records):
    ready = [r for r in records if r.get("boot") == "ready"]
    assert len(ready) == 7
    assert {g["model"] for r in ready for g in r["gpu"]} == {"NVIDIA H200"}
    assert {g["uuid"][:12] for r in ready for g in r["gpu"]} == {"GPU-d07897d5"}
    assert {r["compile_cache"] for r in ready} == {"miss"}
    assert 120 <= min(r["after_s"] for r in ready) <= max(r["after_s"] for r in ready) <= 126
    skipped = {r["server"]: r["skipped"] for r in records if "skipped" in r}
    assert skipped == {"k4-copy0": "no time for a copy", "k3-copy0": "no time for a copy"}
    pins = {n: s["pin"] for n, s in srv.items() if s.get("kind") == "pin"}
    assert set(pins) == {"k4-pin", "k3-pin"}
    for pin in pins.values():
        assert pin["env"] == {"CUBLAS_WORKSPACE_CONFIG": ":16:8", "CUBLASLT_WORKSPACE_SIZE": "1",
                              "TORCHINDUCTOR_SPLIT_REDUCTIONS": "0"}
        assert json.loads(pin["fa_splits"][1]) == {"flash_attn_max_num_splits_for_cuda_graph": 1}


def _file_lists() -> dict[str, list]:
    with tarfile.open(HERE / "logs-h200a.tgz") as tar:
        return {Path(m.name).stem[len("files-"):]: json.load(io.TextIOWrapper(tar.extractfile(m)))
                for m in tar.getmembers() if Path(m.name).name.startswith("files-")}


def test_own_compiles_differ_in_files_but_not_in_wrapper_sizes_and_pins_do():
    """The README's why: every own compile's files differ (names, timings, pickles), its
    generated wrappers have the same sizes; the pinned compiles' wrappers do not."""
    lists = _file_lists()
    assert len(lists) == 7
    def wrappers(name):
        return sorted(size for rel, _sha, size in lists[name]
                      if re.fullmatch(r"inductor_cache/\w\w/c\w+\.py", rel) and size > 10000)
    own = [n for n in lists if "own" in n]
    assert len({tuple(sorted(sha for _, sha, _ in lists[n])) for n in own}) == len(own)
    assert len({tuple(wrappers(n)) for n in own}) == 1
    assert wrappers("k4-pin") != wrappers("k4-own0") and wrappers("k3-pin") != wrappers("k3-own0")
