"""harness_version(): the commit only from the sources' own checkout, a source digest always."""
from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

from harness import __version__
from harness.provenance import harness_version, source_digest

ROOT = Path(__file__).resolve().parents[2]


def test_checkout_version_names_commit_and_sources():
    v = harness_version()
    assert re.fullmatch(r"\d+\.\d+\.\d+\+g[0-9a-f]{7,}(\.dirty)?\.src[0-9a-f]{12}", v), v
    assert v.endswith(f".src{source_digest()}")


def test_snapshot_inside_another_checkout_reports_no_foreign_commit(tmp_path):
    """A `git archive`-style copy of the sources inside some other git checkout (as the GPU
    runs carried .gpu/src inside the repository) must not report that checkout's HEAD; its
    source digest equals the original's, so the records still say which code ran."""
    outer = tmp_path / "outer"
    outer.mkdir()
    git = ["git", "-C", str(outer), "-c", "user.email=t@t", "-c", "user.name=t"]
    subprocess.run(git + ["init", "-q"], check=True)
    (outer / "f.txt").write_text("x")
    subprocess.run(git + ["add", "f.txt"], check=True)
    subprocess.run(git + ["commit", "-q", "-m", "outer"], check=True)
    snap = outer / "snap"
    skip = shutil.ignore_patterns("weights", "runs", "__pycache__", "*.pyc")
    for d in ("harness", "engine"):
        shutil.copytree(ROOT / d, snap / d, ignore=skip)
    out = subprocess.run([sys.executable, "-c", "from harness.provenance import "
                          "harness_version; print(harness_version())"], cwd=snap,
                         capture_output=True, text=True, timeout=60, env={"PATH": "/usr/bin:/bin"})
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == f"{__version__}+src{source_digest()}"
