"""The boot split read from real vLLM 0.26.0 server logs committed under reports/h200."""
from __future__ import annotations

import gzip
from datetime import datetime
from pathlib import Path

import pytest

from engine.vllm.bootlog import compile_cache_from_log, first_request_extra_s, parse_boot_log
from engine.vllm.caches import cache_env, cache_use, snapshot

ROOT = Path(__file__).resolve().parents[2]
LOGS = ROOT / "reports" / "h200" / "logs"
# One lone server on a held machine, torch.compile cache warm (the "44 s" kind).
WARM = LOGS / "k4__7b56c268fe27-r000-gpu1-37751.log.gz"
# One of 22 servers booting together on a fresh machine: compile cache miss.
COLD = LOGS / "fresh_FULL_AND_PIECEWISE__2d8d051b2018-r004-gpu0.1-47257.log.gz"
EXCERPT = ROOT / "reports/h200/phase2/logs/fresh_FULL_AND_PIECEWISE__2d8d051b2018-r004-gpu0.1-49241.txt"


def _read(p: Path) -> str:
    return gzip.open(p, "rt").read() if p.suffix == ".gz" else p.read_text()


def _epoch(s: str) -> float:
    return datetime.strptime(s, "%Y-%m-%d %H:%M:%S").timestamp()


def test_warm_boot_split_from_the_log_alone():
    s = parse_boot_log(_read(WARM))
    # 02:54:46 first API-server line, 02:55:03 first EngineCore line.
    assert s.api_server_at_s == 0.0
    assert s.engine_core_at_s == 17.0
    assert s.weights_s == pytest.approx(0.302844) and s.weights_gib == 0.05
    assert s.compile_cache == "hit" and s.compile_s == pytest.approx(1.20)
    assert s.graph_capture_s == 4.0 and s.graph_capture_gib == 0.12
    assert s.init_engine_s == pytest.approx(6.72)
    assert s.startup_complete
    assert "postprocess_mamba_fused_kernel" in s.jit_kernels
    d = s.durations()
    # Without the launcher's start time, the import stage and the whole boot are unknown.
    assert d["python_start_and_imports_s"] is None and d["boot_s"] is None
    assert d["api_server_to_engine_core_s"] == 17.0


def test_started_at_and_health_give_the_import_stage_and_boot():
    text = _read(WARM)
    start = _epoch("2026-11-30 02:54:30")
    s = parse_boot_log(text, started_at=start, health_at=_epoch("2026-11-30 02:55:15"),
                       latencies=[3.0, 1.0, 1.5, 0.5])
    d = s.durations()
    # Whole-second stamps are placed mid-second against the launcher's exact clock.
    assert d["python_start_and_imports_s"] == 16.5
    assert s.engine_core_at_s == 33.5
    assert d["api_server_to_engine_core_s"] == 17.0
    assert d["boot_s"] == 45.0                    # /health wins over the log's ready line
    assert s.ready_at_s is not None and s.ready_at_s <= 45.0
    assert d["first_request_extra_s"] == 2.0      # 3.0 - median(1.0, 1.5, 0.5)


def test_cold_boot_is_a_compile_miss_with_profile_time():
    s = parse_boot_log(_read(COLD))
    assert s.compile_cache == "miss"
    assert s.compile_s == pytest.approx(11.43)
    assert s.dynamo_s == pytest.approx(1.98)
    assert s.profile_warmup_s == pytest.approx(148.01)
    assert (s.graph_capture_s, s.graph_capture_gib) == (6.0, 0.30)
    assert s.engine_core_at_s == 51.0
    assert not s.engine_core_spawn_forced


def test_grep_excerpt_missing_stages_stay_none():
    # The phase-2 excerpts keep only some lines: no weights line, no startup line.
    s = parse_boot_log(_read(EXCERPT))
    assert s.weights_s is None and s.weights_at_s is None
    assert s.compile_cache == "miss"
    assert s.graph_capture_s is not None
    assert s.durations()["engine_core_to_weights_s"] is None


def test_every_committed_real_log_parses_with_a_compile_verdict():
    logs = sorted(LOGS.glob("*.log.gz"))
    assert len(logs) >= 10
    for p in logs:
        s = parse_boot_log(_read(p))
        assert s.compile_cache in ("hit", "miss"), p.name
        assert s.engine_core_at_s is not None and s.engine_core_at_s > 0, p.name
        if "bootfail" in p.name:   # died before engine init (issue 18's DFlash refusal)
            assert s.init_engine_s is None and s.ready_at_s is None, p.name
            continue
        assert s.init_engine_s is not None, p.name


def test_unknown_text_gives_nothing_guessed():
    s = parse_boot_log("hello\nworld\n")
    assert all(v is None for k, v in s.durations().items())
    assert s.compile_cache is None and compile_cache_from_log("") is None
    assert first_request_extra_s([2.0]) is None


def test_cache_env_and_use(tmp_path):
    env = cache_env(tmp_path / "c", create=True)
    assert set(env) == {"VLLM_CACHE_ROOT", "TRITON_CACHE_DIR", "TORCHINDUCTOR_CACHE_DIR"}
    assert all(Path(v).is_dir() for v in env.values())
    before = snapshot(tmp_path / "c")
    (Path(env["TRITON_CACHE_DIR"]) / "k1").write_text("x")
    after = snapshot(tmp_path / "c")
    log = _read(WARM).replace("/root/.cache/vllm", env["VLLM_CACHE_ROOT"])
    use = cache_use(log, root=tmp_path / "c", before=before, after=after)
    assert use.compile == "hit" and use.compile_dir_shared is True
    assert use.new_files == {"vllm": 0, "triton": 1, "inductor": 0}
    # The committed log used the default ~/.cache: not under the shared root.
    assert cache_use(_read(WARM), root=tmp_path / "c").compile_dir_shared is False


def test_vllm_prefork_argv_and_env():
    from engine.vllm.prefork import VLLM_ENTRY, child_argv, forked_env

    plain = ["/usr/bin/python3", "-m", "vllm.entrypoints.openai.api_server", "--model", "m"]
    assert child_argv(plain) == ["--model", "m"]
    assert VLLM_ENTRY == "-m vllm.entrypoints.openai.api_server"
    assert child_argv(["vllm", "serve", "m"]) is None
    assert forked_env({})["VLLM_WORKER_MULTIPROC_METHOD"] == "fork"
    assert forked_env({"VLLM_WORKER_MULTIPROC_METHOD": "spawn"}, "fork") == {
        "VLLM_WORKER_MULTIPROC_METHOD": "spawn"}
    with pytest.raises(ValueError):
        forked_env({}, "forkserver")


def test_build_launch_cache_dir(tmp_path):
    from engine.presets import resolve
    from engine.vllm.launch import build_launch

    cfg = resolve("ngram", "huge", engine="vllm", model="/m", patches="none")
    spec = build_launch(cfg, port=8001, model="/m", cache_dir=tmp_path / "c")
    assert spec.env["VLLM_CACHE_ROOT"] == str((tmp_path / "c" / "vllm").resolve())
    assert spec.env["TRITON_CACHE_DIR"].endswith("triton")
    assert "VLLM_CACHE_ROOT" not in build_launch(cfg, port=8001, model="/m").env


def test_vllm_adapter_boot_notes_from_a_committed_log(tmp_path):
    """What each record's ``server_boot`` carries for a vLLM server: the split against the
    harness's clock, the compile cache verdict, and (with --cache-dir) whether the log's
    compile directory lies under the shared folder."""
    from harness.serve.engines import VllmAdapter
    text = _read(WARM)
    start = _epoch("2026-11-30 02:54:30")
    notes = VllmAdapter(cache_dir=tmp_path).boot_notes(
        text, started_epoch=start, ready_epoch=_epoch("2026-11-30 02:55:15"))
    assert notes["split"]["boot_s"] == 45.0
    assert notes["split"]["python_start_and_imports_s"] is not None
    assert notes["compile_cache"] == parse_boot_log(text).compile_cache
    assert notes["cache_dir"] == str(tmp_path.resolve())
    assert notes["cache_dir_shared"] is False      # that server used its own default cache
