"""A hostile server (tests/servers/misbehaving_engine.py, not the lab): every misbehaviour
ends in its exact verdict, nothing raises out of the harness, every record is written, no
server is left behind. What needs a process (a hang, an exit, a failed boot) runs through
the real CLI against the real server; every misbehaving answer runs in-process, the same
reply function behind an ``httpx.MockTransport`` driving ``PointRunner``."""
from __future__ import annotations

import argparse
import ast
import dataclasses
import importlib
import json
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from tests.conftest import ROOT
from tests.harness.test_point_runner import make_point, run_point

sys.path.insert(0, str(ROOT / "tests" / "servers"))
import misbehaving_engine  # noqa: E402  (a script folder, not a package)

pytestmark = pytest.mark.usefixtures("no_leftovers")
HOSTILE = ROOT / "tests" / "servers" / "misbehaving_engine.py"


def hostile_cmd(tok_dir: Path, *extra: str) -> str:
    return " ".join([sys.executable, str(HOSTILE), "--port", "{port}", "--model",
                     str(tok_dir), *extra])


def hostile_sweep(cli, tok_dir: Path, *args: str, server: tuple[str, ...] = (),
                  out: str = "results") -> tuple[subprocess.CompletedProcess, list[dict]]:
    """A sweep of the hostile server (``server``: its misbehaviour flags) through ``cli``:
    no traceback, exactly one results file, its records."""
    proc = cli.sweep("--engine", "cmd", "--model", tok_dir,
                     "--server-cmd", hostile_cmd(tok_dir, *server), "--context", "800",
                     "--timeout", "4", *args, out=out, timeout=240)
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    files = list((cli.tmp / out).glob("*.jsonl"))
    assert len(files) == 1, (files, proc.stderr[-2000:])
    return proc, cli.records(out)


def by_phase(recs: list[dict]) -> dict[str, dict]:
    return {r["phase"]: r for r in recs}


# misbehaviour -> (cold verdict, self-hit verdict, a phrase the self-hit reason contains)
CASES = {
    "none": ("ok", "ok", "matches"),
    "empty": ("broken", "broken", "empty answer"),
    "null": ("broken", "broken", "empty answer"),
    "one-char": ("broken", "broken", "1 char of the reference's"),
    "cut2": ("broken", "broken", "2 chars of the reference's"),
    "fragment13": ("broken", "broken", "13 chars of the reference's"),
    "repetition": ("broken", "broken", "degenerate repetition"),
    "one-word": ("diverged", "diverged", "differs from the reference at char"),
    "refusal": ("diverged", "diverged", "differs from the reference at char 0"),
    "trailing": ("diverged", "diverged", "reference then"),
    "wrong-prompt-tokens": ("invalid", "invalid", "usage.prompt_tokens"),
    "no-cached": ("ok", "invalid", "hit not proven: the server reports no cached tokens"),
    "lying-cached": ("invalid", "ok", "matches"),
    "length": ("invalid", "invalid", "cut by max_tokens"),
    "http500": ("crash", "crash", "in an earlier phase"),
    "http429": ("invalid", "invalid", "server rejected the request"),
    "malformed-json": ("invalid", "invalid", "not JSON"),
    "truncated-sse": ("invalid", "invalid", "not JSON"),
    "stall": ("timeout", "timeout", "in an earlier phase"),
    "die": ("crash", "crash", "in an earlier phase"),
    "dead-engine-health": ("crash", "crash", "in an earlier phase"),
    "kv-boot": ("boot-fail", "boot-fail", ""),
}


# Misbehaviours only a real process shows (a hang, an exit, a failed boot, a dead engine
# behind a live /health), and three answers also sent over a real socket as a check that
# the in-process path below sees what a real server sends.
THROUGH_A_PROCESS = ("none", "malformed-json", "http500", "stall", "die",
                     "dead-engine-health", "kv-boot")
# Every misbehaviour that is an answer: the server's own reply function behind an
# httpx.MockTransport, through PointRunner in this process.
IN_PROCESS = tuple(h for h in sorted(CASES) if h not in ("stall", "die", "dead-engine-health",
                                                         "kv-boot"))


def check_cells(how: str, cells: dict[str, dict]) -> None:
    """The verdicts, reason and facts ``CASES`` expects of one misbehaviour."""
    cold, hit, phrase = CASES[how]
    assert set(cells) == {"cold", "self-hit"}, cells
    assert (cells["cold"]["verdict"], cells["self-hit"]["verdict"]) == (cold, hit), \
        [(r["verdict"], r["reason"]) for r in cells.values()]
    assert phrase in cells["self-hit"]["reason"]
    for r in cells.values():
        if r["verdict"] in ("broken", "diverged"):
            assert r["first_divergence"]["char"] is not None
    if how == "lying-cached":
        sh = cells["self-hit"]
        assert (sh["computed_tail"], sh["intended_tail"]) == (1, 5) and sh["tail_note"]


def residue_for(how: str) -> str:
    # residue 5: a lie of n - 1 cached tokens leaves a tail of 1 where 5 was meant
    return "5" if how == "lying-cached" else "1"


@pytest.mark.parametrize("how", THROUGH_A_PROCESS)
def test_each_process_misbehaviour_has_its_exact_verdict(tmp_path, tok_dir, how, cli):
    proc, recs = hostile_sweep(cli, tok_dir, "--residues", residue_for(how),
                               server=("--misbehave", how))
    check_cells(how, by_phase(recs))
    assert proc.returncode == (0 if how == "none" else 1), proc.stderr[-2000:]
    if how == "kv-boot":
        assert "KV cache is needed" in cli.report()


def hostile_handler(tok_dir: Path, how: str):
    """An ``httpx.MockTransport`` handler: the hostile server's routes and replies
    (``misbehaving_engine.chat_reply``) with no process and no port."""
    args = argparse.Namespace(unit=128, misbehave=how, at_residue=-1, only_hit=False,
                              margin=4.0)
    state = misbehaving_engine.fake_engine.State(argparse.Namespace(model=str(tok_dir)))
    json_type = {"content-type": misbehaving_engine.JSON}

    def handler(request: httpx.Request) -> httpx.Response:
        path = request.url.path
        if request.method == "GET" and path == "/health":
            return httpx.Response(200, content=b"", headers={"content-type": "text/plain"})
        if request.method == "GET" and path == "/v1/models":
            return httpx.Response(200, json={"object": "list", "data": [{"id": "hostile"}]})
        body = json.loads(request.content or b"{}")
        if request.method == "POST" and path == "/tokenize":
            return httpx.Response(200, json={"count": state.tok.count(body["messages"])})
        if request.method == "POST" and path == "/v1/chat/completions":
            action, code, reply, ctype = misbehaving_engine.chat_reply(state, args, body)
            assert action == "send", action
            return httpx.Response(code, content=misbehaving_engine.encode(reply),
                                  headers={"content-type": ctype})
        return httpx.Response(404, content=misbehaving_engine.encode(
            {"error": {"message": "not found"}}), headers=json_type)

    return handler


@pytest.mark.parametrize("how", IN_PROCESS)
def test_each_answer_misbehaviour_has_its_exact_verdict_in_process(tmp_path, tok_dir, how):
    opts, adapter, point = make_point(tmp_path, tok_dir, "--residues", residue_for(how),
                                      "--timeout", "4")
    recs, _ = run_point(tmp_path, opts, adapter, point, hostile_handler(tok_dir, how))
    check_cells(how, recs)


def test_the_in_process_server_answers_the_same_after_the_report_engine_is_imported(
        tmp_path, tok_dir):
    """Issue 38: ``[trailing]`` above once answered ``HOSTILE`` + the trailing sentence
    (153 chars, 0 verbatim) under ``-n auto``: ``test_cli_wiring`` imports
    ``tests/reports/hostile_engine.py`` for its text, and that import replaced
    ``fake_engine.copy_answer`` for the whole worker. Imported first here, in this
    process, it must change nothing."""
    importlib.import_module("tests.reports.hostile_engine")
    opts, adapter, point = make_point(tmp_path, tok_dir, "--residues", "1", "--timeout", "4")
    recs, _ = run_point(tmp_path, opts, adapter, point, hostile_handler(tok_dir, "trailing"))
    check_cells("trailing", recs)


def _module_level_patches(path: Path) -> list[str]:
    """``module.NAME = ...`` at a file's top level (not under ``if __name__ == ...``)."""
    tree = ast.parse(path.read_text())
    imported = {a.asname or a.name for n in tree.body if isinstance(n, ast.Import)
                for a in n.names}
    return [f"{path.relative_to(ROOT)}:{n.lineno} {ast.unparse(t)}"
            for n in tree.body if isinstance(n, (ast.Assign, ast.AugAssign))
            for t in (getattr(n, "targets", None) or [n.target])
            if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name)
            and t.value.id in imported]


def test_no_test_server_script_patches_another_module_when_imported():
    """The general form of the case above: a helper script under ``tests/`` changes another
    module (the fake engine's answer, say) only when it runs as a script, never at import,
    where it would change every later test of the same pytest worker."""
    helpers = [p for p in (ROOT / "tests").rglob("*.py")
               if not p.name.startswith(("test_", "conftest"))]
    assert any(p.name == "hostile_engine.py" for p in helpers)
    found = [hit for p in helpers for hit in _module_level_patches(p)]
    assert not found, found

@pytest.mark.parametrize("isolation", ["reset", "auto"])
def test_a_cold_phase_without_cached_tokens_on_a_reused_server_is_invalid(tmp_path, tok_dir,
                                                                          isolation):
    """Only a fresh server's cold request is cold by construction (CASES: `no-cached` cold
    is ok there); on a server that served earlier points, a cold phase the server does not
    prove with ``cached_tokens`` 0 is ``invalid``, never ok (docs/isolation.md)."""
    opts, adapter, point = make_point(tmp_path, tok_dir, "--residues", "1", "--timeout", "4",
                                      "--isolation", isolation)
    if isolation == "auto":
        point = dataclasses.replace(point, isolation="reset")
    recs, _ = run_point(tmp_path, opts, adapter, point, hostile_handler(tok_dir, "no-cached"))
    assert recs["cold"]["verdict"] == "invalid", recs["cold"]["reason"]
    assert recs["cold"]["reason"].startswith(
        "cold not proven: the server reports no cached tokens (reset isolation)")
