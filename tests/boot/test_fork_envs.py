"""``--launcher prefork`` when the engine's imports read ``CUDA_VISIBLE_DEVICES`` and
``RESIDUE_LAB_PATCHES`` (torch, vLLM and the patch plugin on the H200): servers on one GPU
fork from the run's parent, a server on another GPU or with other patches forks from a
parent of its own started for it, and a parent never forks a child whose value differs
from its own. Real lab servers on 127.0.0.1, real fork servers."""
from __future__ import annotations

import dataclasses
import os
import shutil
from pathlib import Path

import psutil
import pytest

from engine.prefork import ForkServerUnavailable, alive
from engine.presets import ServingConfig
from harness.run import launchers
from harness.serve.engines import LabAdapter
from harness.run.launchers import run_launcher
from harness.serve.orphans import OWNER_ENV, owner_token
from harness.serve.slots import Slot
from tests.boot.test_prefork import ROOT, free_port, healthy, wait_until

READER = "tests.boot.fake_cvd_reader"


class GpuReadingLab(LabAdapter):
    """The lab engine with vLLM's shape of env: the patch selection in
    ``RESIDUE_LAB_PATCHES``, and a preloaded module that reads it and the GPU at import."""

    def command(self, cfg, port, slot):
        argv, env = super().command(cfg, port, slot)
        return argv, {**env, "RESIDUE_LAB_PATCHES": cfg.patches}

    @classmethod
    def prefork(cls):
        spec = LabAdapter.prefork()
        return dataclasses.replace(spec, preload=(*spec.preload, READER))


@pytest.fixture
def run_env(monkeypatch):
    monkeypatch.chdir(ROOT)
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)


def launcher_for(tmp_path: Path, cfg: ServingConfig, slot: Slot):
    launcher = run_launcher("prefork", GpuReadingLab(), first_cfg=cfg, slot=slot,
                            logs_dir=tmp_path / "logs")
    assert launcher.fork_server is not None, launcher.summary()
    assert {"CUDA_VISIBLE_DEVICES", "RESIDUE_LAB_PATCHES"} <= set(launcher.read_at_import)
    return launcher


def boot(launcher, tmp_path: Path, cfg: ServingConfig, slot: Slot):
    """A server as harness.run.point starts one: the slot's GPU in its env, its parent
    (``prepare`` does it off the loop there), then ``start``; returns it once /health
    answers."""
    port = free_port()
    argv, env = GpuReadingLab().command(cfg, port, slot)
    env = {"CUDA_VISIBLE_DEVICES": slot.gpu, **env}
    server = launcher(argv, env, port, tmp_path / f"srv-{slot.id}-{port}.log", slot)
    server.start_parent()
    server.start()
    wait_until(lambda: healthy(port) or server.exited() is not None, 60, f"/health on {port}")
    assert healthy(port), (tmp_path / f"srv-{slot.id}-{port}.log").read_text()[-2000:]
    return server


def parent_of(server) -> int:
    return psutil.Process(server.proc.pid).ppid()


def test_servers_on_one_gpu_fork_from_the_runs_parent(tmp_path, run_env):
    # issue 24 on the H200: the parent ran without CUDA_VISIBLE_DEVICES, its imports read
    # it, and 41 of 41 servers on GPU 0 started plain ("... value differs")
    cfg = ServingConfig(patches="all")
    slots = Slot.gpus(["0", "0"])
    launcher = launcher_for(tmp_path, cfg, slots[0])
    servers = []
    try:
        servers = [boot(launcher, tmp_path, cfg, s) for s in slots]
        assert [(s.how, s.fallback_reason) for s in servers] == [("forked", None)] * 2
        assert {parent_of(s) for s in servers} == {launcher.fork_server.proc.pid}
        assert len(launcher.fork_servers) == 1
        assert launcher.describe()["more_fork_servers"] == []
    finally:
        for s in servers:
            s.kill_tree_now()
        launcher.close()


def test_another_gpu_or_other_patches_get_a_parent_of_their_own(tmp_path, run_env):
    cfg, other = ServingConfig(patches="all"), ServingConfig(patches="none")
    g0, g1, g1b = Slot("g0", "0"), Slot("g1", "1"), Slot("g1b", "1")
    launcher = launcher_for(tmp_path, cfg, g0)
    first = launcher.fork_server.proc.pid
    servers = []
    try:
        servers = [boot(launcher, tmp_path, c, s)
                   for c, s in ((cfg, g1), (cfg, g1b), (other, g0), (cfg, g0))]
        assert [(s.how, s.fallback_reason) for s in servers] == [("forked", None)] * 4
        parents = [parent_of(s) for s in servers]
        # the two servers on GPU 1 share one parent, started once; patches "none" has its own
        assert parents[0] == parents[1] and parents[3] == first
        assert len({parents[0], parents[2], first}) == 3
        assert len(launcher.fork_servers) == 3
        more = sorted(m["for"] for m in launcher.describe()["more_fork_servers"])
        assert more == ["CUDA_VISIBLE_DEVICES=1", "RESIDUE_LAB_PATCHES=none"]
        assert (tmp_path / "logs" / "fork-server-1.log").is_file()
        # the safety stays: a parent refuses a child whose value differs from its own
        with pytest.raises(ForkServerUnavailable, match="read .*CUDA_VISIBLE_DEVICES"):
            launcher.fork_server.spawn("-m engine.lab", [], log_path=tmp_path / "x.log",
                                       env={**launcher.fork_server.env,
                                            "CUDA_VISIBLE_DEVICES": "1"})
    finally:
        for s in servers:
            s.kill_tree_now()
        launcher.close()
    # nothing left behind: every parent, and what it forked, is gone
    pids = {first, *parents}
    wait_until(lambda: not any(alive(p) for p in pids), 20, f"survivors of {pids}")


def test_past_the_most_parents_a_server_starts_plain_and_says_why(tmp_path, run_env,
                                                                  monkeypatch):
    monkeypatch.setattr(launchers, "MAX_FORK_SERVERS", 1)
    cfg = ServingConfig(patches="all")
    launcher = launcher_for(tmp_path, cfg, Slot("g0", "0"))
    server = None
    try:
        server = boot(launcher, tmp_path, cfg, Slot("g1", "1"))
        assert server.how == "plain"
        assert "none has this server's CUDA_VISIBLE_DEVICES=1" in server.fallback_reason
        assert os.getsid(server.proc.pid) == server.proc.pid
        assert len(launcher.fork_servers) == 1
    finally:
        if server is not None:
            server.kill_tree_now()
        launcher.close()


def test_a_sweep_on_two_gpus_and_two_patch_sets_forks_every_server(tmp_path, run_env,
                                                                    monkeypatch):
    """Through the sweep lifecycle (``harness.residue_sweep.Sweep``): every server of the run is
    forked, the manifest names the parents started for GPU 1 and patches none, and the
    run leaves no parent behind."""
    from harness import ExitCode, Sweep, options_from_argv
    from harness.serve.engines import LAB_MODEL_DIR

    # the sweep makes a LabAdapter itself (harness.serve.engines.make_adapter): it gets
    # GpuReadingLab's command and prefork
    lab_command, lab_prefork = LabAdapter.command, LabAdapter.prefork

    def command(self, cfg, port, slot):
        argv, env = lab_command(self, cfg, port, slot)
        return argv, {**env, "RESIDUE_LAB_PATCHES": cfg.patches}
    monkeypatch.setattr(LabAdapter, "command", command)
    monkeypatch.setattr(LabAdapter, "prefork", classmethod(
        lambda cls: dataclasses.replace(lab_prefork(), preload=(*lab_prefork().preload, READER))))
    shutil.copytree(LAB_MODEL_DIR, tmp_path / "model")
    opts = options_from_argv(["--spec", "mtp", "--ctx", "huge", "--cudagraph", "PIECEWISE",
                              "--patches", "all,none", "--residues", "2-3", "--launcher",
                              "prefork", "--model", str(tmp_path / "model"), "--slots", "2",
                              "--out", str(tmp_path / "r"), "--no-progress"])
    # the lab refuses --gpus (CPU only): its slots are given GPU ids here, as --gpus 0,1 does
    opts = opts.replace(slots=tuple(Slot.gpus(["0", "1"])))
    result = Sweep(opts).run()
    assert result.exit_code in (ExitCode.OK, ExitCode.NOT_OK), result
    boots = {r.server_boot["log"]: r.server_boot for r in result.records}
    assert len(boots) >= 4        # 2 residues x 2 configurations, a fresh server each
    assert {(b["launcher"], b.get("fallback_reason")) for b in boots.values()} == \
        {("forked", None)}
    backend = result.manifest.backend
    # which (GPU, patches) pairs occur depends on which slot takes which point: slot 1
    # takes one at once, so a parent for GPU 1 is always among them
    more = [m["for"] for m in backend.more_fork_servers]
    assert len(set(more)) == len(more) and any(m.startswith("CUDA_VISIBLE_DEVICES=1") for m in more)
    assert set(more) <= {"CUDA_VISIBLE_DEVICES=1", "RESIDUE_LAB_PATCHES=none",
                         "CUDA_VISIBLE_DEVICES=1, RESIDUE_LAB_PATCHES=none"}, more
    pairs = {(r.slot, r.config["patches"]) for r in result.records}
    assert len(more) == len(pairs) - 1, (more, pairs)
    assert backend.fork_server_failures == []
    logs = list((tmp_path / "r").rglob("fork-server*.log"))
    assert len(logs) == 1 + len(more)
    # nothing left: every process the sweep started carries its token (harness.serve.orphans)
    token = owner_token()
    wait_until(lambda: not _carrying(token), 20, "the sweep's processes to go")


def _carrying(token: str) -> list[int]:
    out = []
    for p in psutil.process_iter():
        try:
            if p.environ().get(OWNER_ENV) == token and p.status() != psutil.STATUS_ZOMBIE:
                out.append(p.pid)
        except psutil.Error:
            pass
    return out
