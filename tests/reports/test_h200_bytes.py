"""Issue 48's experiment on one H200 (h200a) and one H100 (h100b; reports/h200/bytes/README.md),
its claims checked against the records, logs and file lists that came back. Each machine's
answer table is parsed and each row compared with the records of its servers; if a claim
changes, its check changes with it."""
from __future__ import annotations

import gzip
import hashlib
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


def _answer_rows(section: str = "## What it answers") -> list[list[str]]:
    part = README.split(section)[1].split("\n\n")[1]
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in part.splitlines()]
    return [r for r in rows if r[0].startswith("k")]


def _cell_text(s: dict, residue: int, phase: str) -> str:
    ok, sha = s["cells"][(residue, phase)]
    return f"{'ok' if ok else 'not ok'} `{sha}`"


def test_the_answer_table_is_what_each_group_of_servers_gave(srv):
    _check_table(_answer_rows(), 4, srv)


def _check_table(rows: list[list[str]], n: int, srv: dict) -> None:
    assert len(rows) == n
    for name, fps, *cells in rows:
        m = re.fullmatch(r"(k\d-(?:own|pin|carried))(?: ×(\d))?", name)
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


def _members(machine: str, prefix: str) -> dict[str, bytes]:
    with tarfile.open(HERE / f"logs-{machine}.tgz") as tar:
        return {Path(m.name).name: tar.extractfile(m).read() for m in tar.getmembers()
                if Path(m.name).name.startswith(prefix)}


def _file_lists(machine: str = "h200a") -> dict[str, list]:
    return {n[len("files-"):-len(".json")]: json.loads(b)
            for n, b in _members(machine, "files-").items()}


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


# --- h100b: the second machine (one H100, h200a's k4-own0 cache carried) ---

@pytest.fixture(scope="module")
def h100b():
    records = load([HERE / "records-h100b.jsonl.gz"])
    return records, servers(records)


def test_the_second_machines_table_is_what_each_group_gave(h100b):
    _check_table(_answer_rows("## What the second machine answers"), 6, h100b[1])


def test_h100b_is_one_h100_every_boot_a_miss_the_copies_timed_out(h100b):
    records, srv = h100b
    ready = [r for r in records if r.get("boot") == "ready"]
    assert len(ready) == 7 and {r["compile_cache"] for r in ready} == {"miss"}
    assert {g["model"] for r in ready for g in r["gpu"]} == {"NVIDIA H100 80GB HBM3"}
    assert {g["uuid"][:12] for r in ready for g in r["gpu"]} == {"GPU-75aaa4f9"}
    assert 108 <= min(r["after_s"] for r in ready) <= max(r["after_s"] for r in ready) <= 141
    timeouts = {r["server"]: (r["after_s"], r["copied"]["at_s"])
                for r in records if r.get("boot") == "timeout"}
    assert set(timeouts) == {"k4-copy0", "k3-copy0"}
    assert all(80 <= after <= 81.5 and 101 <= at <= 103 for after, at in timeouts.values())
    carried = {n: s["source"] for n, s in srv.items() if s.get("kind") == "carried"}
    assert carried == {"k4-carried": "carried:k4-own0", "k3-carried": "carried:k4-own0"}
    assert {srv[n]["fingerprint"] for n in carried} == {"763f3b819700"}
    env = {n: b.decode() for n, b in _members("h100b", "env.txt").items()}["env.txt"]
    assert "sm_count 132 " in env and "cc 9 0 name NVIDIA H100 80GB HBM3" in env
    assert "sm_count 132 " in _members("h200a", "env.txt")["env.txt"].decode()


def test_h100b_agrees_with_h200a_unpinned_and_pinned(srv, h100b):
    """Every cell of every own and pin server of one machine equals the other's."""
    def cells(servers_, kind):
        return {(s["k"], c, v) for s in servers_.values() if s.get("kind") == kind
                for c, v in s["cells"].items()}
    for kind in ("own", "pin"):
        assert cells(srv, kind) == cells(h100b[1], kind), kind
    assert (4, (5, "self-hit"), (False, "d09a0f59410e")) in cells(h100b[1], "pin")


def test_every_carried_and_copied_cache_failed_to_load_its_aot_artefact():
    logs = {n: gzip.decompress(b).decode(errors="replace")
            for n, b in _members("h100b", "k").items() if n.endswith(".log.gz")}
    failed = {n.split(".")[0] for n, t in logs.items()
              if re.search(r"Compiling model again due to a load failure from \S+"
                           r"/torch_aot_compile/9609952ef35b\w+/rank_0_0/model, reason: "
                           r"Kernel index 1 not found in id_to_kernel", t)}
    assert failed == {"k4-carried", "k3-carried", "k4-copy0", "k3-copy0"}
    assert all("fused_qk_rmsnorm_rope_gate" in logs[f"{n}.log.gz"] for n in failed)
    aot = {n: set(re.findall(r"torch_aot_compile/(\w{12})", t)) for n, t in logs.items()}
    assert all(v == {"9609952ef35b"} for n, v in aot.items() if "pin" not in n)


def test_the_two_own_k4_digests_differ_by_one_pointwise_pick():
    lists = _file_lists("h100b")
    rows = {n: {tuple(r) for r in lists[n]["kernel_rows"]} for n in ("k4-own0", "k4-own1")}
    only0, only1 = rows["k4-own0"] - rows["k4-own1"], rows["k4-own1"] - rows["k4-own0"]
    assert len(only0) == 1 and not only1
    (kind, sha), = only0
    # which file it is, from k4-own0's cache that came back
    from engine.vllm.kernel_digest import _best_config
    with tarfile.open(HERE / "cache-h100b.tar.xz") as tar:
        files = {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}
    hit = [n for n, b in files.items() if n.endswith(".best_config")
           and hashlib.sha1(_best_config(b)).hexdigest() == sha]
    assert len(hit) == 1 and json.loads(files[hit[0]])["XBLOCK"] == 128
    # k4-own1's pick for that kernel: the one other config of the same candidates it has
    same = {hashlib.sha1(_best_config(b)).hexdigest(): json.loads(b)["XBLOCK"]
            for n, b in files.items() if n.endswith(".best_config")
            and json.loads(b)["configs_hash"] == json.loads(files[hit[0]])["configs_hash"]}
    assert {x for s, x in same.items() if ("torch_aot_compile", s) in rows["k4-own1"]} == {256}
    count = {n: sum(r[1] in same for r in lists[n]["kernel_rows"]) for n in rows}
    assert count["k4-own0"] == count["k4-own1"]
    beside = [b.decode() for n, b in files.items()
              if Path(n).parent == Path(hit[0]).parent and n.endswith(".py")]
    assert len(beside) == 1 and "def triton_poi_fused_clone_split_4(" in beside[0]
    assert "@triton_heuristics.pointwise(" in beside[0]
