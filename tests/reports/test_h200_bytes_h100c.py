"""Issue 48's experiment on a third machine (h100c: one H100, nothing carried;
reports/h200/bytes/README.md, "What the third machine answers"), its claims checked against
the records, the file lists and the cache that came back: two own k = 4 compiles of one machine
split into the two byte classes, and the class follows the compile's pad_mm decision."""
from __future__ import annotations

import gzip
import json
import re
import tarfile
from pathlib import Path

import pytest

from tests.reports.bytes_archive import (HERE, assert_cells, file_lists, ready_boots,
                                         servers_of, signature, table_rows)

SECTION = "## What the third machine answers (h100c)"
PADDED_KERNEL = "def triton_poi_fused_mm_t_"
MACHINES = ("h200a", "h100b", "h100c")


@pytest.fixture(scope="module")
def srv():
    return servers_of("h100c")


def _members(machine: str, prefix: str) -> dict[str, bytes]:
    with tarfile.open(HERE / f"logs-{machine}.tgz") as tar:
        return {Path(m.name).name: tar.extractfile(m).read() for m in tar.getmembers()
                if Path(m.name).name.startswith(prefix)}


def _files(machine: str) -> dict[str, list]:
    return {n: d["files"] for n, d in file_lists(machine).items()}


def _cache_files(name: str) -> dict[str, bytes]:
    with tarfile.open(HERE / name) as tar:
        return {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}


def _pad_decision(files: dict[str, bytes]) -> tuple[bool, float]:
    """The pad_mm entry of Inductor's local autotune cache: (pad?, base mm time in ms)."""
    (blob,) = [b for n, b in files.items() if "/inductor_cache/cache/" in n]
    cache = json.loads(blob)["cache"]
    (pad,) = [v for k, v in cache.items() if "torch.Size([256, 4])" in k and "exclude_pad" in k]
    (base,) = [v for k, v in cache.items() if k.startswith("base mm time:")]
    return pad, base


def test_the_third_machines_table_is_what_each_server_gave(srv):
    rows = table_rows(SECTION)
    assert [r[0] for r in rows] == ["k4-own0", "k4-own1", "k4-pin", "k4-copy0", "k3-own0",
                                    "k3-pin", "k3-copy0"]
    lists = _files("h100c")
    for name, fp, padded, *cells in rows:
        s = srv[name]
        assert f"`{s['fingerprint']}`" == fp, name
        if padded.endswith("decision"):
            assert s["kind"] == "copy" and padded == f"{s['source']}'s decision", name
        else:
            assert signature(lists[name]) == ((17, 71) if padded == "padded" else (14, 65)), name
        assert_cells(s, name, cells)


def test_one_h100_every_boot_a_miss_and_both_copies_booted(srv):
    ready = ready_boots("h100c", "GPU-3f1d28c0-7e87-34dc-7e24-3351ea213392")
    assert len(ready) == 7 and {r["compile_cache"] for r in ready} == {"miss"}
    assert 91 <= min(r["after_s"] for r in ready) <= max(r["after_s"] for r in ready) <= 124
    assert {n: s["source"] for n, s in srv.items() if s.get("kind") == "copy"} == {
        "k4-copy0": "k4-own0", "k3-copy0": "k3-own0"}
    assert not any("problem" in s for s in srv.values())


def test_two_own_compiles_of_one_machine_gave_the_two_classes_and_the_pins_neither(srv):
    own0, own1, pin = srv["k4-own0"]["cells"], srv["k4-own1"]["cells"], srv["k4-pin"]["cells"]
    assert own0[(5, "cold")] == own0[(5, "self-hit")] == (False, "d09a0f59410e")
    assert own1[(5, "cold")] == pin[(5, "cold")] == (False, "95c227a4fecf")
    assert own1[(5, "self-hit")] == pin[(5, "self-hit")] == (True, "5f2f1596bf8d")
    other = {m: servers_of(m)["k4-pin"]["cells"]
             for m in ("h200a", "h100b")}
    assert {c[(5, "cold")] for c in other.values()} == {(False, "d09a0f59410e")}


def test_the_padded_compile_pads_the_4_wide_matmul_and_the_unpadded_does_not():
    padded, plain = _cache_files("cache-h100c.tar.xz"), _cache_files("cache-h100b.tar.xz")
    assert _pad_decision(padded) == (True, pytest.approx(0.02576, abs=1e-5))
    assert _pad_decision(plain) == (False, pytest.approx(0.03725, abs=1e-5))
    def kernels(files):
        return {m for b in files.values() for m in re.findall(
            r"def (triton_poi_fused_mm_t_\d+)\(", b.decode(errors="replace"))}
    assert len(kernels(padded)) == 3 and not kernels(plain)
    src = next(b.decode() for n, b in padded.items()
               if n.endswith(".py") and PADDED_KERNEL.encode() in b)
    # 8 x 256 out, rows below 4 loaded, the rest zeros: the weight padded from 4 to 8 columns
    assert "xnumel = 2048" in src and "x1 = xindex // 256" in src
    assert "tl.full([1], 4, tl.int64)" in src and "other=0.0" in src


def test_across_three_machines_the_pad_signature_decides_the_k4_class():
    seen = {"padded": set(), "plain": set()}
    for m in MACHINES:
        srv, lists = servers_of(m), _files(m)
        for name, s in srv.items():
            if s.get("kind") not in ("own", "pin"):
                continue
            sig = signature(lists[name])
            assert sig in ((17, 71), (14, 65)), (m, name, sig)
            key = "padded" if sig == (17, 71) else "plain"
            cold = s["cells"][(5, "cold")] if s["k"] == 4 else s["cells"][(4, "cold")]
            seen[key].add((s["k"], cold[1], f"{m}:{name}"))
    assert {(k, sha) for k, sha, _ in seen["padded"]} == {(4, "d09a0f59410e")}
    assert {n for *_, n in seen["padded"]} == {"h200a:k4-pin", "h100b:k4-pin", "h100c:k4-own0"}
    assert {sha for _, sha, _ in seen["plain"]} == {"95c227a4fecf"} and len(seen["plain"]) == 14


def test_the_copy_carried_its_sources_pad_decision_and_recompiled():
    lists = _files("h100c")
    def cache_rows(name):
        return {sha for rel, sha, _ in lists[name] if rel.startswith("inductor_cache/cache/")}
    assert cache_rows("k4-copy0") == cache_rows("k4-own0") != cache_rows("k4-own1")
    logs = _members("h100c", "k4-copy0.log")
    text = gzip.decompress(logs["k4-copy0.log.gz"]).decode(errors="replace")
    assert "Compiling model again due to a load failure" in text
    assert "Kernel index 1 not found in id_to_kernel" in text


def test_no_fingerprint_is_shared_by_servers_with_other_bytes():
    by_fp: dict[tuple, set] = {}
    for m in MACHINES:
        for s in servers_of(m).values():
            for cell, (_ok, sha) in s["cells"].items():
                by_fp.setdefault((s["fingerprint"], s["k"], cell), set()).add(sha)
    assert by_fp and all(len(v) == 1 for v in by_fp.values())
    fps = {s["fingerprint"] for s in servers_of("h100c").values()}
    assert {"8bacd52b900f", "e041a0715f2c"} <= fps
