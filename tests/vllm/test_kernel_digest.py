"""Issue 48: the compile fingerprint follows the kernels, not each compile's paths, timings
and pickles. Fixtures are the file lists of seven servers of one H200 run (2026-12-06,
``files-SERVER.json``: path, sha1, size): three ngram k = 4 and two k = 3 servers compiling
into caches of their own (one answer per broken cell between them), and two "pin" servers
(TORCHINDUCTOR_SPLIT_REDUCTIONS=0 among the pins: other generated code, other sizes).

Each list is made back into a cache folder: what enters by name or is a kernel source keeps
its recorded sha1 as content (so a real difference stays one); a generated wrapper module
(named by a hash of its text, which names the server's folder) is its size plus that
folder, as the one cache that came back shows (``# kernel path: /tmp/rl-bytes-caches/
k4-own0/...``); a pickle is its own sha1 plus the folder; a best_config is its name's config
plus a timing drawn from its sha1."""
from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from engine.vllm.caches import compile_fingerprint
from engine.vllm.kernel_digest import bind

FIXTURE = Path(__file__).parents[1] / "fixtures" / "compile_files" / "h200a-2026-12-06.json.gz"
AOT, GRAPH = "torch_aot_compile/9609952ef35b", "1f4f224191"


def _content(rel: str, sha: str, size: int, root: Path) -> str:
    if "/fxgraph/" in rel or "/aotautograd/" in rel or "artifact_" in rel or rel.endswith(
            ("rank_0_0/model", "vllm_compile_cache.py")):
        return f"pickle {sha} of {root}"
    if rel.endswith(".best_config"):
        return json.dumps({"XBLOCK": 1024, "configs_hash": rel.split("/")[-1],
                           "time_taken_ms": int(sha[:3], 16), "triton_cache_hash": sha})
    if rel.startswith("inductor_cache/cache/"):
        return json.dumps({"system": {"device": {"name": "NVIDIA H200"}},
                           "cache": {"base mm time": int(sha[:4], 16) / 1e5, "pad": False}})
    if rel.startswith("inductor_cache/") and rel.endswith(".py") and size > 10000:
        return f"# kernel path: {root}/vllm/torch_compile_cache/{AOT}/x.py\nwrapper {size}\n"
    return f"source {sha}"


def _server(tmp: Path, name: str, files: list) -> str:
    """The cache folder of one server from its file list, and the log lines naming it."""
    root = tmp / name
    for rel, sha, size in files:
        base = GRAPH if rel.startswith("rank_0_0/backbone") else AOT
        path = root / "vllm" / "torch_compile_cache" / base / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(_content(rel, sha, size, root))
    cc = root / "vllm" / "torch_compile_cache"
    return (f"INFO Using cache directory: {cc / GRAPH}/rank_0_0/backbone for vLLM's "
            f"torch.compile\nINFO saved AOT compiled function to {cc / AOT}/rank_0_0/model\n")


@pytest.fixture(scope="module")
def prints(tmp_path_factory):
    servers = json.loads(gzip.decompress(FIXTURE.read_bytes()))["servers"]
    tmp = tmp_path_factory.mktemp("caches")
    return servers, {n: compile_fingerprint(_server(tmp, n, f)) for n, f in servers.items()}


def test_every_own_compile_of_one_machine_shares_one_fingerprint(prints):
    servers, fp = prints
    own = [n for n in servers if "own" in n]
    # the raw files differ between every two own compiles (what the old digest hashed)
    raw = {n: sorted(sha for _, sha, _ in servers[n]) for n in own}
    assert len({tuple(v) for v in raw.values()}) == len(own)
    assert len({fp[n]["fingerprint"] for n in own}) == 1
    assert fp["k4-own0"]["kernels"] and fp["k4-own0"]["files"] < len(servers["k4-own0"])


def test_a_cache_carried_from_another_folder_keeps_its_fingerprint(prints, tmp_path):
    """A carried cache's sources still name the folder they were compiled in."""
    servers, fp = prints
    moved = [[rel, sha, size] for rel, sha, size in servers["k4-own0"]]
    log = _server(tmp_path, "k4-carried", moved)
    for wrapper in (tmp_path / "k4-carried").rglob("c*.py"):
        wrapper.write_text(wrapper.read_text().replace(str(tmp_path / "k4-carried"),
                                                       "/tmp/rl-bytes-caches/k4-own0"))
    assert compile_fingerprint(log)["fingerprint"] == fp["k4-own0"]["fingerprint"]
    # on a hit the server writes the wrappers again under names of its own folder
    sources = list((tmp_path / "k4-carried").rglob("inductor_cache/*/c*.py"))
    assert len(sources) == 27
    for wrapper in sources:
        (wrapper.parent / f"x{wrapper.name}").write_text(
            wrapper.read_text().replace("/tmp/rl-bytes-caches/k4-own0", str(tmp_path)))
    assert compile_fingerprint(log)["fingerprint"] == fp["k4-own0"]["fingerprint"]


def test_a_pinned_compile_whose_kernels_differ_gets_another(prints):
    _servers, fp = prints
    assert fp["k4-pin"]["fingerprint"] != fp["k4-own0"]["fingerprint"]
    assert fp["k3-pin"]["fingerprint"] != fp["k3-own0"]["fingerprint"]


def test_the_gpu_and_the_run_time_switches_enter_the_fingerprint(prints):
    _servers, fp = prints
    own = fp["k4-own0"]
    h200 = bind(own, ["NVIDIA H200"], {"CUDA_VISIBLE_DEVICES": "0"})
    assert bind(fp["k4-own1"], ["NVIDIA H200"], {"CUDA_VISIBLE_DEVICES": "1"}) == {
        **h200, "dirs": fp["k4-own1"]["dirs"]}
    h100 = bind(own, ["NVIDIA H100 80GB HBM3"], {})
    pinned = bind(own, ["NVIDIA H200"], {"CUBLAS_WORKSPACE_CONFIG": ":16:8"})
    assert len({h200["fingerprint"], h100["fingerprint"], pinned["fingerprint"]}) == 3
    assert pinned["facts"]["knobs"] == {"CUBLAS_WORKSPACE_CONFIG": ":16:8"}
    assert bind({"fingerprint": "lab123"}, ["x"], {}) == {"fingerprint": "lab123"}
