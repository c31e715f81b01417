"""``PointRunner`` in-process: a fake launcher and an ``httpx.MockTransport`` stand in for
the server, so each fault (timeout, crash, a 4xx, an unproven cache hit) is one handler
and the records are checked without a process or a port."""
from __future__ import annotations

import asyncio
import json
from pathlib import Path

import httpx
import pytest

from harness.command.cli import build_options, sweep_parser
from harness.serve.engines import make_adapter
from harness.run.plan import Point, plan_points
from harness.run.point import PointRunner
from harness.records.phase_record import SCHEMA_VERSION, PhaseRecord
from harness.server_pool import Slot

TEMPLATE = "fake-server --port {port}"


class FakeServer:
    """What ``PointRunner`` needs of a server process, with no process behind it."""

    def __init__(self, argv, env, port, log_path: Path, slot):
        self.argv, self.port, self.log_path = argv, port, log_path
        self.boot_s: float | None = None
        self.alive = True
        self.stopped = False

    @property
    def base_url(self) -> str:
        return f"http://fake-{self.port}"

    async def prepare(self) -> None:
        pass

    def start(self) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self.log_path.write_text("fake server log\nValueError: the engine died\n")

    async def wait_ready(self, client, timeout: float) -> float:
        assert await client.health()
        self.boot_s = 0.01
        return self.boot_s

    async def stop(self) -> float:
        self.stopped = True
        self.alive = False
        return 0.0

    def tree_alive(self) -> bool:
        return self.alive


class Launcher:
    def __init__(self):
        self.servers: list[FakeServer] = []

    def __call__(self, *args) -> FakeServer:
        self.servers.append(FakeServer(*args))
        return self.servers[-1]


def make_point(tmp_path: Path, tok_dir: Path, *extra: str) -> tuple[object, object, Point]:
    argv = ["--engine", "cmd", "--model", str(tok_dir), "--server-cmd", TEMPLATE,
            "--context", "800", "--residues", "7", "--out", str(tmp_path), *extra]
    opts = build_options(sweep_parser().parse_args(argv), argv)
    adapter = make_adapter(opts.serving.engine, opts.serving.server_cmd)
    plan = plan_points(opts, adapter)
    return opts, adapter, plan.points[0]


def engine(point: Point, chat):
    """A MockTransport handler: a healthy OpenAI-compatible server whose chat answers
    come from ``chat(phase_index, body)``."""
    sent = []

    def handler(request: httpx.Request) -> httpx.Response:
        path = request.url.path
        if path == "/health":
            return httpx.Response(200)
        if path == "/version":
            return httpx.Response(200, json={"version": "fake-1"})
        if path == "/v1/models":
            return httpx.Response(200, json={"data": [{"id": "fake-model"}]})
        if path == "/tokenize":
            return httpx.Response(200, json={"count": point.plan.target_len})
        if path == "/metrics":
            return httpx.Response(200, text="")
        if path == "/v1/chat/completions":
            body = json.loads(request.content)
            sent.append(body)
            return chat(len(sent) - 1, body)
        return httpx.Response(404)

    return handler, sent


def answer(point: Point, text: str, cached: int) -> httpx.Response:
    return httpx.Response(200, json={
        "choices": [{"message": {"content": text}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": point.plan.target_len, "completion_tokens": 5,
                  "prompt_tokens_details": {"cached_tokens": cached}}})


def run_point(tmp_path: Path, opts, adapter, point: Point, handler, launcher=None):
    launcher = launcher or Launcher()

    async def go():
        async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as http:
            runner = PointRunner(opts, adapter, run_id="run-t", logs_dir=tmp_path / "logs",
                                 http=http, version="test", launcher=launcher)
            emitted: list[PhaseRecord] = []
            result = await runner.run_fresh(point, Slot("cpu0"), emitted.append)
            assert emitted == result.records
            return result

    result = asyncio.run(go())
    assert launcher.servers and all(s.stopped for s in launcher.servers)
    written = []
    for rec in result.records:  # every record a PhaseRecord of this schema, as it is written
        assert isinstance(rec, PhaseRecord) and rec.schema_version == SCHEMA_VERSION
        written.append(rec.as_dict())
        assert PhaseRecord.from_dict(written[-1]).as_dict() == written[-1]
    return {r["phase"]: r for r in written}, result.timing


def test_clean_point_is_ok_on_both_phases(tmp_path, tok_dir):
    opts, adapter, point = make_point(tmp_path, tok_dir)
    hit = point.plan.target_len - point.residue
    handler, sent = engine(point, lambda i, body: answer(point, point.plan.expected,
                                                         0 if i == 0 else hit))
    recs, timing = run_point(tmp_path, opts, adapter, point, handler)
    assert [recs[p]["verdict"] for p in ("cold", "self-hit")] == ["ok", "ok"]
    assert recs["self-hit"]["computed_tail"] == point.residue
    assert recs["cold"]["engine_version"] == "fake-1" and recs["cold"]["model"] == "fake-model"
    assert len(sent) == 2 and sent[0]["max_tokens"] == opts.measure.max_tokens
    assert set(timing) == {"boot", "requests", "teardown", "point"}


def test_timeout_marks_the_rest_of_the_point(tmp_path, tok_dir):
    opts, adapter, point = make_point(tmp_path, tok_dir)

    def chat(i, body):
        raise httpx.ReadTimeout("no answer")

    handler, sent = engine(point, chat)
    recs, _ = run_point(tmp_path, opts, adapter, point, handler)
    assert recs["cold"]["verdict"] == "timeout"
    assert recs["self-hit"]["verdict"] == "timeout"
    assert "in an earlier phase" in recs["self-hit"]["reason"]
    assert len(sent) == 1  # nothing is sent to a server that stopped answering
    assert any("ValueError" in ln for ln in recs["cold"]["log_excerpt"])


def test_crash_is_judged_by_the_process_not_the_http_error(tmp_path, tok_dir):
    opts, adapter, point = make_point(tmp_path, tok_dir)
    launcher = Launcher()

    def chat(i, body):  # the engine process dies under the request
        for s in launcher.servers:
            s.alive = False
        raise httpx.ConnectError("connection refused")

    handler, _ = engine(point, chat)
    recs, _ = run_point(tmp_path, opts, adapter, point, handler, launcher)
    assert recs["cold"]["verdict"] == "crash"
    assert "server process dead" in recs["cold"]["reason"]
    assert recs["self-hit"]["verdict"] == "crash"


def test_a_4xx_from_a_live_server_is_invalid_not_a_crash(tmp_path, tok_dir):
    opts, adapter, point = make_point(tmp_path, tok_dir)
    handler, sent = engine(point, lambda i, body: httpx.Response(400, text="prompt too long"))
    recs, _ = run_point(tmp_path, opts, adapter, point, handler)
    for phase in ("cold", "self-hit"):
        assert recs[phase]["verdict"] == "invalid"
        assert recs[phase]["reason"].startswith("server rejected the request: HTTP 400")
    assert len(sent) == 2  # a rejected request does not end the point


def test_a_hit_not_proven_by_cached_tokens_is_invalid(tmp_path, tok_dir):
    opts, adapter, point = make_point(tmp_path, tok_dir)
    handler, _ = engine(point, lambda i, body: answer(point, point.plan.expected, 0))
    recs, _ = run_point(tmp_path, opts, adapter, point, handler)
    assert recs["cold"]["verdict"] == "ok"
    assert recs["self-hit"]["verdict"] == "invalid"
    assert "no prefix-cache hit (cached_tokens 0)" in recs["self-hit"]["reason"]
    assert "answer judged ok" in recs["self-hit"]["reason"]


def test_an_unknown_verdict_cannot_be_recorded():
    with pytest.raises(ValueError, match="unknown verdict"):
        PhaseRecord.from_dict({**_minimal(), "verdict": "fine"})


def test_old_records_without_schema_version_read_as_version_1():
    rec = PhaseRecord.from_dict(_minimal())
    assert rec.schema_version == 1 and "schema_version" not in _minimal()


def _minimal() -> dict:
    return {"run_id": "r", "harness_version": "v", "config_id": "c", "config_label": "l",
            "config": {}, "requested_config": {}, "config_mismatch": [], "engine": "lab",
            "engine_version": None, "patches": "all", "patch_status": None, "model": None,
            "slot": "cpu0", "node": "n", "isolation": "fresh", "residue": 4, "modulus": 128,
            "target_len": 4100, "templated_len": 4100, "templated_len_source": "local tokenizer",
            "phase": "cold", "reference": "passage", "boot_s": 0.1, "started_at": "t",
            "rerun": "sweep", "verdict": "ok"}
