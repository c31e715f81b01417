"""Issue 48's experiment on a fourth machine with Inductor's matmul padding off (h100d-nopad:
`TORCHINDUCTOR_SHAPE_PADDING=0` for every server; reports/h200/bytes/README.md, "What the
fourth machine answers"), its claims checked against the records, the file lists and the
cache that came back: every k = 4 server gave one class, no compile wrote a pad decision, and
the two copies share a fingerprint because their folders hold one set of kernel rows."""
from __future__ import annotations

import re
import tarfile
from pathlib import Path

import pytest

from tests.reports.bytes_archive import (HERE, README, ROOT, assert_cells, file_lists,
                                         ready_boots, records_of, servers_of, signature,
                                         table_rows)

SECTION = "## What the fourth machine answers (h100d-nopad: shape padding off)"
RUN = "h100d-nopad"
EARLIER = ("h200a", "h100b", "h100c")
AUTOTUNE = "inductor_cache/cache/"   # where h100b's and h100c's compiles wrote pad_mm's pick


@pytest.fixture(scope="module")
def srv():
    return servers_of(RUN)


@pytest.fixture(scope="module")
def lists():
    return file_lists(RUN)


def _padded_kernels(cache: str) -> tuple[set[str], int, int]:
    """(the `triton_poi_fused_mm_t_*` kernels, `clone_mm_split` mentions, autotune cache
    files) of a compile cache that came back."""
    kernels, clones, autotune = set(), 0, 0
    with tarfile.open(HERE / cache) as tar:
        for m in tar.getmembers():
            autotune += m.isfile() and AUTOTUNE in m.name
            if not (m.isfile() and m.name.endswith(".py")):   # kernels live in the sources
                continue
            text = tar.extractfile(m).read().decode(errors="replace")
            kernels |= set(re.findall(r"def (triton_poi_fused_mm_t_\d+)\(", text))
            clones += text.count("clone_mm_split")
    return kernels, clones, autotune


def test_the_row_names_the_variable_and_the_page_is_regenerated():
    (row,) = [line for line in README.splitlines() if line.startswith(f"| {RUN} |")]
    assert "`export TORCHINDUCTOR_SHAPE_PADDING=0; bash benchmarks/gpu_bytes_experiment.sh " \
           "240 h100d-nopad`" in row and "188.9 s device wall" in row
    regen = (ROOT / "reports" / "h200" / "regenerate.sh").read_text()
    assert (f"page bytes/summary-{RUN}.md python ../../benchmarks/gpu_bytes_summary.py "
            f"bytes/records-{RUN}.jsonl.gz") in regen


def test_the_fourth_machines_table_is_what_each_server_gave(srv, lists):
    rows = table_rows(SECTION)
    assert [r[0] for r in rows] == ["k4-own0", "k4-own1", "k4-pin", "k4-copy0", "k3-own0",
                                    "k3-pin", "k3-copy0"]
    for name, fp, shown, *cells in rows:
        s = srv[name]
        assert f"`{s['fingerprint']}`" == fp, name
        assert shown == "%d / %d" % signature(lists[name]["files"]), name
        assert_cells(s, name, cells)


def test_one_h100_every_boot_a_miss_and_both_copies_booted(srv):
    ready = ready_boots(RUN, "GPU-0f80f714-4caa-0d48-ff64-55fbfdb9939d")
    assert len(ready) == 7 and {r["compile_cache"] for r in ready} == {"miss"}
    assert 85 <= min(r["after_s"] for r in ready) <= max(r["after_s"] for r in ready) <= 116
    assert {n: s["source"] for n, s in srv.items() if s.get("kind") == "copy"} == {
        "k4-copy0": "k4-own0", "k3-copy0": "k3-own0"}
    assert not any("problem" in s for s in srv.values())


def test_every_k4_server_gave_one_class_and_k3_what_it_always_gave(srv):
    k4 = {n: s["cells"] for n, s in srv.items() if s["k"] == 4}
    assert sorted(k4) == ["k4-copy0", "k4-own0", "k4-own1", "k4-pin"]
    assert {c[(5, "cold")] for c in k4.values()} == {(False, "95c227a4fecf")}
    assert {c[(5, "self-hit")] for c in k4.values()} == {(True, "5f2f1596bf8d")}
    assert {c[(4, "reset-cold")] for c in k4.values()} == {(True, "5f2f1596bf8d")}
    k3 = [s["cells"] for s in srv.values() if s["k"] == 3]
    assert len(k3) == 3 and {(c[(4, "cold")], c[(4, "self-hit")]) for c in k3} == {
        ((False, "95c227a4fecf"), (False, "5d12df70bf43"))}
    assert "4 of 4 k = 4 servers gave one class" in README


def test_no_compile_wrote_a_pad_decision_and_the_cache_has_no_padded_matmul(lists):
    assert not [n for n, d in lists.items() for f in d["files"] if f[0].startswith(AUTOTUNE)]
    assert {signature(d["files"]) for n, d in lists.items() if "copy" not in n} == {(14, 64)}
    # h100b's and h100c's compiles each wrote the decision: the check above can see one
    for m in ("h100b", "h100c"):
        assert all(any(f[0].startswith(AUTOTUNE) for f in d["files"])
                   for d in file_lists(m).values()), m
    assert _padded_kernels(f"cache-{RUN}.tar.xz") == (set(), 0, 0)
    kernels, clones, autotune = _padded_kernels("cache-h100c.tar.xz")   # the padded one
    assert len(kernels) == 3 and clones > 0 and autotune == 1


def test_the_copies_share_a_fingerprint_because_their_kernel_rows_are_one_set(srv, lists):
    ready = {r["server"]: r for r in records_of(RUN)
             if r.get("boot") == "ready"}
    assert ready["k4-copy0"]["copied"]["from"].endswith("/k4-own0")
    assert ready["k3-copy0"]["copied"]["from"].endswith("/k3-own0")
    kernels = {n: r["compile"]["kernels"] for n, r in ready.items()}
    assert kernels["k4-copy0"] == kernels["k3-copy0"] == "2689cbbd2d70"
    assert srv["k4-copy0"]["fingerprint"] == srv["k3-copy0"]["fingerprint"] == "cef294fa5586"
    rows = {n: {tuple(r) for r in d["kernel_rows"]} for n, d in lists.items()}
    assert rows["k4-copy0"] == rows["k3-copy0"] and len(rows["k4-copy0"]) == 48
    assert rows["k4-own0"] != rows["k3-own0"] and len(rows["k4-own0"] ^ rows["k3-own0"]) <= 3
    # one compile for both k: the own compiles' folders are the same names
    folders = {n: [Path(d).name for d in lists[n]["dirs"]] for n in ("k4-own0", "k3-own0")}
    assert folders["k4-own0"] == folders["k3-own0"] == [
        "fd20cf8917", "9609952ef35b5e539cc0517d2b3c7ee16d8a8bea49c509680441c4d9c7a027fc"]
    assert [Path(d).name for d in lists["k4-copy0"]["dirs"]][0] == "34ad849ad2"
    def configs(name):
        return {f[0]: f[1] for f in lists[name]["files"] if f[0].endswith(".best_config")}
    src, copy = configs("k4-own0"), configs("k4-copy0")
    assert sum(copy.get(p) != sha for p, sha in src.items()) == 11 and len(copy) - len(src) == 8


def test_the_chance_the_readme_gives_is_the_earlier_machines_pad_rate():
    padded = plain = padded4 = plain4 = 0
    for m in EARLIER:
        srv, lists = servers_of(m), file_lists(m)
        for name, s in srv.items():
            if s.get("kind") in ("own", "pin"):
                is_padded = signature(lists[name]["files"]) == (17, 71)
                padded, plain = padded + is_padded, plain + (not is_padded)
                if s["k"] == 4:
                    padded4, plain4 = padded4 + is_padded, plain4 + (not is_padded)
    assert (padded, padded + plain, padded4, padded4 + plain4) == (3, 17, 3, 10)
    assert "3 of the 17 own and pinned compiles" in README and "(3 of the 10 at" in README
    for ok, n in ((plain4, padded4 + plain4), (plain, padded + plain)):
        assert f"({ok}/{n})³ ≈ {(ok / n) ** 3:.2f}" in README
