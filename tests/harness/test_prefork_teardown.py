"""Issue 27 item 9: ``--launcher prefork`` on the lab added ~10 s to a one-point run. The
cause (measured on a 2-vCPU box: teardown 10.08 s per point against 0.08 s plain): the
fork server reaped an exited server only on its next request, so the server stayed a
zombie and the harness waited for it to go for its whole grace, twice (SIGTERM, then
SIGKILL). The fork server now reaps on SIGCHLD. Through the real entry point."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.conftest import ROOT


# a real sweep in a subprocess with real servers: e2e (issue 50: the auto mark missed it)
@pytest.mark.e2e
def test_a_prefork_point_tears_down_as_fast_as_a_plain_one(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("GITHUB_")}
    env["PYTHONPATH"] = str(ROOT)
    proc = subprocess.run([sys.executable, "-m", "harness", "--residues", "0,1", "--slots",
                           "1", "--no-progress", "--launcher", "prefork", "--out",
                           str(tmp_path / "o")], cwd=tmp_path, capture_output=True,
                          text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "fork server up" in proc.stderr
    (manifest,) = (tmp_path / "o").glob("*.manifest.json")
    timing = json.loads(manifest.read_text())["timing"]
    assert timing["boot_split"]["launchers"] == {"forked": 2}
    # a grace of 5 s (server_pool.TERM_GRACE_S) waited out shows as >= 5 s
    assert timing["median_teardown_s"] < 2.0, timing
    assert timing["wall_s"] < 10.0, timing
