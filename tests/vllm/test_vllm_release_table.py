"""The release table (engine/vllm/patches/releases.py, docs/vllm-stack.md) checked against
vLLM's own sources: the pinned 0.27.1 installed here, and the other releases read from
their PyPI wheels by HTTP range requests (a few hundred KB each, cached under
~/.cache/residue-lab/vllm-src). Offline, the remote releases skip; the installed one
follows the usual rule (skip, or fail under RESIDUE_LAB_REQUIRE_VLLM=1).
"""
from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from engine.vllm.patches import releases as R
from engine.vllm.patches._sources import (MEMBERS, NoVllmSource, Offline, RangeFile,
                                          WheelTree, open_source, release_tree)
from engine.vllm.patches._static import check_source_tree
from tests._vllm import require_vllm

REPO = Path(__file__).resolve().parents[2]
REMOTE = ("0.26.0", "0.28.0", "0.33.0")


def words(gates: dict[str, str]) -> dict[str, str]:
    return {k: v.split(":")[0] for k, v in gates.items()}


def facts(version: str) -> R.Release:
    rel, exact = R.release_facts(version)
    assert exact, f"{version} is not a release the table was read from"
    return rel


def installed_site() -> Path:
    vllm = require_vllm(module_level=False)
    return Path(vllm.__file__).resolve().parents[1]


# ---------------------------------------------------------------- the pinned release
def test_installed_release_matches_its_row():
    site = installed_site()
    from importlib.metadata import version

    assert words(check_source_tree(site)) == facts(version("vllm")).expected_gates()


def test_installed_release_plugin_agrees_with_the_source_gates():
    installed_site()
    from engine.vllm import patches as P

    P.restore_patches()
    try:
        P.apply_patches("all")
        targets = P.patch_manifest()["patches"]
        runtime = {f"{name}/{t}": s.split(" ")[0].rstrip(":")
                   for name, info in targets.items() for t, s in info["targets"].items()}
    finally:
        P.restore_patches()
    assert runtime == words(check_source_tree(installed_site()))


# ---------------------------------------------------------------- other releases, by source
@pytest.mark.slow
@pytest.mark.parametrize("version", REMOTE)
def test_release_source_matches_its_row(version):
    try:
        tree = release_tree(version)
    except Offline as exc:
        pytest.skip(f"PyPI not reachable: {exc}")
    assert tree.version == version
    assert words(check_source_tree(tree)) == facts(version).expected_gates()


def test_v2_is_not_needed_from_0_28_and_v1_is_shape_only_through_0_33():
    for rel in R.RELEASES:
        gates = rel.expected_gates()
        assert gates["prefill-discriminator/v1-runner"] == "applied"
        newer = R._key(rel.version) >= R._key("0.28.0")
        assert gates["prefill-discriminator/v2-runner"] == \
            ("not-needed" if newer else "applied")


# ---------------------------------------------------------------- wheels, read not unpacked
@pytest.fixture
def small_wheel(tmp_path):
    """A wheel holding the installed vLLM's real gate files (and nothing else)."""
    site = installed_site()
    path = tmp_path / "vllm-0.27.1-cp38-abi3-linux_x86_64.whl"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for rel in MEMBERS + ("vllm/__init__.py",):
            if (site / rel).is_file():
                zf.write(site / rel, rel)
        zf.writestr("vllm-0.27.1.dist-info/METADATA", "Name: vllm\nVersion: 0.27.1\n")
    return path


@pytest.mark.slow
def test_a_local_wheel_reads_like_the_tree(small_wheel):
    tree = open_source(str(small_wheel))
    assert tree.version == "0.27.1"
    assert check_source_tree(tree) == check_source_tree(installed_site())


def test_range_reads_fetch_only_parts_of_the_wheel(small_wheel):
    httpx = pytest.importorskip("httpx")
    data = small_wheel.read_bytes()
    asked: list[str] = []

    def serve(request):
        asked.append(request.headers["range"])
        start, end = map(int, request.headers["range"].removeprefix("bytes=").split("-"))
        return httpx.Response(206, content=data[start:end + 1])

    with httpx.Client(transport=httpx.MockTransport(serve)) as client:
        wheel = WheelTree(RangeFile(client, "http://127.0.0.1/w.whl", len(data), chunk=4096),
                          label="w.whl")
        assert wheel.read("vllm/envs.py") == \
            (installed_site() / "vllm/envs.py").read_text()
    assert len(asked) * 4096 < len(data)  # never the whole file


def test_range_reads_refuse_a_server_without_ranges(small_wheel):
    httpx = pytest.importorskip("httpx")
    with httpx.Client(transport=httpx.MockTransport(
            lambda r: httpx.Response(200, content=b"x"))) as client:
        with pytest.raises(Offline):
            WheelTree(RangeFile(client, "http://127.0.0.1/w.whl", 10 ** 6), label="w")


# ---------------------------------------------------------------- no vLLM: one line, exit 2
def test_check_source_of_a_dir_without_vllm(tmp_path):
    with pytest.raises(NoVllmSource):
        open_source(str(tmp_path))
    proc = subprocess.run([sys.executable, "-m", "engine.vllm.patches", "--check-source",
                           str(tmp_path)], capture_output=True, text=True, cwd=REPO,
                          env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=120)
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert proc.stderr.startswith("vLLM is not installed at ")
    assert len(proc.stderr.strip().splitlines()) == 1


def test_status_without_vllm_says_so():
    code = ("import sys; sys.modules['vllm'] = None\n"
            "from engine.vllm.patches.__main__ import main\n"
            "sys.exit(main(['--status']))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=120)
    assert (proc.returncode, proc.stdout, proc.stderr) == (2, "", "vLLM is not installed\n")


# ---------------------------------------------------------------- the rule the harness asks
@pytest.mark.parametrize("version,runner,method,hybrid,want", [
    ("0.26.0", "auto", "mtp", True, ("v1", False)),      # the H200 runs: hybrid on V1
    ("0.26.0", "auto", "mtp", False, ("v2", False)),     # dense: V2, still shape-only
    ("0.27.1", "auto", "ngram", False, ("v1", False)),   # ngram unsupported on V2
    ("0.28.0", "auto", "mtp", True, ("v1", False)),      # hybrids stay on V1 through 0.28
    ("0.28.0", "v2", "mtp", True, ("v2", True)),         # PR #51865
    ("0.29.0", "auto", "mtp", True, ("v2", True)),       # V2 default from 0.29
    ("0.31.0", "auto", "ngram", True, ("v1", False)),    # ngram on V1 until 0.32
    ("0.32.0", "auto", "ngram", True, ("v2", True)),
    ("0.33.0", "v1", "dflash", True, ("v1", False)),     # V1 shape-only through 0.33
])
def test_dispatch_rule(version, runner, method, hybrid, want):
    rule = R.dispatch_rule(version, runner, method, hybrid=hybrid)
    assert (rule.runner, rule.prefill_check) == want
    assert rule.exact


def test_dispatch_rule_between_read_releases_says_so():
    rule = R.dispatch_rule("0.28.1", "v2", "mtp")
    assert (rule.release_read, rule.exact, rule.prefill_check) == ("0.28.0", False, True)
    assert "nearest read" in rule.line()
    with pytest.raises(ValueError):
        R.dispatch_rule("0.25.0", "v1", "mtp")
    with pytest.raises(ValueError):
        R.dispatch_rule("0.27.1", "v3", "mtp")


def test_runner_env_is_vllms_switch():
    assert R.runner_env("auto") == {}
    assert R.runner_env("v1") == {"VLLM_USE_V2_MODEL_RUNNER": "0"}
    assert R.runner_env("v2") == {"VLLM_USE_V2_MODEL_RUNNER": "1"}


def test_launch_runner_axis_sets_vllms_switch():
    from engine.presets import resolve
    from engine.vllm.launch import LaunchError, build_launch

    cfg = resolve(spec="mtp", ctx="huge")
    env = {r: build_launch(cfg, port=8001, model="/m", runner=r).env for r in R.RUNNERS}
    assert env["v1"]["VLLM_USE_V2_MODEL_RUNNER"] == "0"
    assert env["v2"]["VLLM_USE_V2_MODEL_RUNNER"] == "1"
    assert "VLLM_USE_V2_MODEL_RUNNER" not in env["auto"]
    with pytest.raises(LaunchError, match="unknown runner"):
        build_launch(cfg, port=8001, model="/m", runner="v3")
