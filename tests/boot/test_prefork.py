"""The pre-imported launcher, for real on this machine: lab-engine children forked from a
parent that imported the lab once boot, answer /health and the same bytes as a plain
boot, die with their whole tree, and the parent's death (even SIGKILL) leaves nothing."""
from __future__ import annotations

import os
import signal
import socket
import sys
import time
from pathlib import Path

import httpx
import pytest

from engine.prefork import ForkServer, ForkServerUnavailable, alive, session_pids, start_child

ROOT = Path(__file__).resolve().parents[2]
LAB_PRELOAD = ["engine.lab.cli", "engine.lab.serve", "engine.lab.server"]
DOC = "\n".join(f"{i:03d}. amber lantern folds the river under copper bridge {i * 7}"
                for i in range(1, 30))
CHAT = {"model": "lab-copy", "max_tokens": 200, "messages": [
    {"role": "user", "content": "Reproduce the first 3 lines of the document below exactly.\n\n"
     + DOC}]}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until(cond, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = cond()
        if value:
            return value
        time.sleep(0.02)
    raise TimeoutError(what)


def healthy(port: int) -> bool:
    try:
        return httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


def lab_env() -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")


def lab_argv(port: int) -> list[str]:
    return ["--port", str(port), "--enable-prefix-caching", "--block-size", "128",
            "--enable-prompt-tokens-details"]


@pytest.fixture
def server(tmp_path):
    fs = ForkServer(LAB_PRELOAD, ["engine.lab.no_such_module"], log_path=tmp_path / "fs.log",
                    env=lab_env(), cwd=ROOT).start()
    try:
        yield fs
    finally:
        fs.close()


def test_forked_lab_servers_boot_answer_like_plain_and_die_with_their_tree(server, tmp_path):
    assert server.info["optional_failed"].keys() == {"engine.lab.no_such_module"}
    ports = [free_port() for _ in range(3)]
    kids = [start_child([], env=lab_env(), log_path=tmp_path / f"fork{i}.log", cwd=ROOT,
                        server=server, entry="-m engine.lab", child_argv=lab_argv(p))
            for i, p in enumerate(ports[:2])]
    plain = start_child([sys.executable, "-m", "engine.lab", *lab_argv(ports[2])],
                        env=lab_env(), log_path=tmp_path / "plain.log", cwd=ROOT)
    try:
        assert [k.how for k in kids] == ["forked", "forked"] and plain.how == "plain"
        for p in ports:
            wait_until(lambda: healthy(p), 60, f"/health on {p}")
        answers = [httpx.post(f"http://127.0.0.1:{p}/v1/chat/completions", json=CHAT,
                              timeout=30).json()["choices"][0]["message"]["content"]
                   for p in ports]
        assert answers[0].startswith("001. amber lantern")
        assert answers[0] == answers[1] == answers[2]
        for k in kids:
            assert k.poll() is None and k.tree() == [k.pid]
            assert os.getsid(k.pid) == k.pid                     # its own session
    finally:
        left = [k.kill(grace=5) for k in (*kids, plain)]
    assert left == [[], [], []]
    for k in kids:
        assert wait_until(lambda: k.poll() is not None, 10, "reaped") is not None
        assert not alive(k.pid)
    for p in ports:
        assert not healthy(p)


def _tree(server: ForkServer, tmp_path: Path, name: str):
    pid_file = tmp_path / f"{name}.pids"
    kid = server.spawn("tests.boot.tree_entry:main", [str(pid_file)],
                       log_path=tmp_path / f"{name}.log", env={**lab_env(), "TREE_MARK": name})
    wait_until(pid_file.exists, 30, "tree entry pid file")
    pid, helper, mark = pid_file.read_text().split()
    assert (int(pid), mark) == (kid.pid, name)   # the child got its own env
    return kid, int(helper)


def test_kill_takes_the_grandchild_too(server, tmp_path):
    kid, helper = _tree(server, tmp_path, "a")
    assert set(kid.tree()) == {kid.pid, helper}
    assert kid.kill(grace=5) == []
    assert not alive(kid.pid) and not alive(helper)


@pytest.mark.parametrize("how", ["sigkill", "close"])
def test_parent_death_leaves_nothing(tmp_path, how):
    fs = ForkServer(LAB_PRELOAD, log_path=tmp_path / "fs.log", env=lab_env(), cwd=ROOT).start()
    port = free_port()
    lab = fs.spawn("-m engine.lab", lab_argv(port), log_path=tmp_path / "lab.log", env=lab_env())
    kid, helper = _tree(fs, tmp_path, "b")
    wait_until(lambda: healthy(port), 60, "/health")
    pids = [lab.pid, kid.pid, helper, fs.proc.pid]
    try:
        if how == "sigkill":   # no handler runs: PDEATHSIG and the watchdog must do it
            os.kill(fs.proc.pid, signal.SIGKILL)
            fs.proc.wait(10)
        else:
            fs.close()
        wait_until(lambda: not any(alive(p) for p in pids), 20, f"survivors of {pids}")
        assert session_pids(lab.pid) == [] and session_pids(kid.pid) == []
        assert not healthy(port)
    finally:
        for p in pids:
            if alive(p):
                os.kill(p, signal.SIGKILL)
        fs.close()


def test_import_failure_makes_it_unusable_and_start_child_falls_back(tmp_path):
    fs = ForkServer(["engine.lab.cli", "no_such_package_xyz"], log_path=tmp_path / "fs.log",
                    env=lab_env(), cwd=ROOT)
    with pytest.raises(ForkServerUnavailable, match="import no_such_package_xyz failed"):
        fs.start()
    assert fs.proc is None
    port = free_port()
    kid = start_child([sys.executable, "-m", "engine.lab", *lab_argv(port)], env=lab_env(),
                      log_path=tmp_path / "plain.log", cwd=ROOT, entry="-m engine.lab",
                      child_argv=lab_argv(port), fallback_reason="fork server unusable")
    try:
        assert kid.how == "plain" and kid.fallback_reason == "fork server unusable"
        wait_until(lambda: healthy(port), 60, "/health")
    finally:
        assert kid.kill(grace=5) == []


def test_cuda_initialised_by_the_preload_is_refused(tmp_path):
    fs = ForkServer(["tests.boot.fake_cuda"], log_path=tmp_path / "fs.log", env=lab_env(),
                    cwd=ROOT)
    with pytest.raises(ForkServerUnavailable,
                       match=r"initialised CUDA \(first seen after importing tests.boot.fake_cuda\)"):
        fs.start()


def test_an_optional_module_that_initialises_cuda_is_skipped_not_fatal(tmp_path):
    # vLLM 0.26.0 on the H200: the model's FLA ops initialise CUDA at import. The parent
    # must stay usable: that module is left to the child, the rest is preloaded.
    optional = ["tests.boot.fake_clean_a", "tests.boot.fake_cuda_touch", "no_such_mod_xyz",
                "tests.boot.fake_clean_b"]
    with ForkServer(["tests.boot.fake_torch_lazy"], optional, log_path=tmp_path / "fs.log",
                    env=lab_env(), cwd=ROOT) as fs:
        assert fs.info["optional_skipped_cuda"] == ["tests.boot.fake_cuda_touch"]
        assert list(fs.info["optional_failed"]) == ["no_such_mod_xyz"]
        out = tmp_path / "mods.json"
        kid = fs.spawn("tests.boot.modules_entry:main", [str(out)], log_path=tmp_path / "k.log")
        assert kid.how == "forked" and kid.wait(30) == 0
    import json

    got = json.loads(out.read_text())
    assert got["cuda"] is False           # the child inherited a parent without CUDA
    assert {"tests.boot.fake_clean_a", "tests.boot.fake_clean_b"} <= set(got["modules"])
    assert "tests.boot.fake_cuda_touch" not in got["modules"]


def test_bad_entry_is_refused_and_falls_back_to_plain(server, tmp_path):
    port = free_port()
    kid = start_child([sys.executable, "-m", "engine.lab", *lab_argv(port)], env=lab_env(),
                      log_path=tmp_path / "x.log", cwd=ROOT, server=server,
                      entry="engine.lab", child_argv=lab_argv(port))
    try:
        assert kid.how == "plain" and "entry must be" in kid.fallback_reason
        wait_until(lambda: healthy(port), 60, "/health")
    finally:
        assert kid.kill(grace=5) == []


def test_dash_m_entry_runs_as_python_m_would(tmp_path):
    extra = tmp_path / "extra"
    extra.mkdir()
    env = {**lab_env(), "MAIN_MARK": "m1", "EXTRA_DIR": str(extra),
           "PYTHONPATH": f"{extra}{os.pathsep}{ROOT}", "VLLM_TEST_ONLY_VAR": "1"}
    with ForkServer(["tests.boot.main_entry"], log_path=tmp_path / "fs.log", env=lab_env(),
                    cwd=ROOT) as fs:
        out = tmp_path / "out.json"
        kid = fs.spawn("-m tests.boot.main_entry", [str(out)], log_path=tmp_path / "m.log",
                       env=env)
        assert kid.wait(30) == 3                       # its exit code comes back
    import json

    got = json.loads(out.read_text())
    assert got["name"] == "__main__" and got["argv"][1:] == [str(out)]
    assert got["argv"][0].endswith("main_entry.py")   # sys.argv[0] is the module's file
    assert got["preloaded_copy"] is False              # the preloaded copy was dropped
    assert got["sys_path_has"] is True and got["mark"] == "m1"
    # Variables a library may read at import are named when they differ from the parent's.
    assert set(kid.env_differs) >= {"VLLM_TEST_ONLY_VAR", "PYTHONPATH"}


def test_the_harness_launcher_names_what_it_left_to_each_server(tmp_path):
    from harness.serve.engines import PreforkSpec
    from harness.run.launchers import PreforkLauncher

    spec = PreforkSpec(("tests.boot.fake_torch_lazy",),
                       ("tests.boot.fake_clean_a", "tests.boot.fake_cuda_touch"), "-m engine.lab",
                       child_argv=lambda argv: argv[3:])
    launcher = PreforkLauncher(spec, log_path=tmp_path / "fs.log", env=lab_env(),
                               cwd=str(ROOT)).start()
    try:
        assert launcher.describe()["not_preloaded_cuda"] == ["tests.boot.fake_cuda_touch"]
        assert "left to each server (they initialise CUDA): tests.boot.fake_cuda_touch" in \
            launcher.summary()
    finally:
        launcher.close()


def test_a_variable_read_at_import_that_differs_falls_back_to_plain(tmp_path):
    # issue 23 risk: the fork server named env_differs and forked anyway, so a child ran
    # with the parent's import-time reading; now it refuses and the child starts plain
    env = {**lab_env(), "RESIDUE_FAKE_KNOB": "parent"}
    with ForkServer(["tests.boot.fake_env_reader"], log_path=tmp_path / "fs.log", env=env,
                    cwd=ROOT) as fs:
        out = tmp_path / "out.json"

        def child(log: str, **extra: str):
            return start_child([sys.executable, "-m", "tests.boot.main_entry", str(out)],
                               env=dict(env, MAIN_MARK="m", EXTRA_DIR=str(tmp_path), **extra),
                               log_path=tmp_path / log, server=fs,
                               entry="-m tests.boot.main_entry", child_argv=[str(out)], cwd=ROOT)

        same = child("a.log")
        assert same.how == "forked" and same.wait(30) == 3
        other = child("b.log", RESIDUE_FAKE_KNOB="child")
        assert other.how == "plain", other
        assert "read RESIDUE_FAKE_KNOB at import" in other.fallback_reason
        assert other.wait(30) == 3
        # a read through os.environb is recorded by its name too (it crashed the server)
        third = child("c.log", RESIDUE_FAKE_BYTES_KNOB="child")
        assert third.how == "plain", third
        assert "read RESIDUE_FAKE_BYTES_KNOB at import" in third.fallback_reason
        assert third.wait(30) == 3
