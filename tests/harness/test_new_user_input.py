"""Issue 36's bad input through the real entry point, each one line on stderr and exit 2
(or 3: the sweep cannot run here), nothing run: argparse prefix matching (``--residue 3``
ran a real sweep), a residue named twice or an empty item, a ``--junit`` file in a folder
that does not exist (``/nonexistent/`` was created at the root), ``--served-model-name``
that the server does not serve (the server's own 404 quoted, not "no /tokenize"), and
``--engine vllm`` where vLLM is not installed (exit 3 for every model form: an HF id, a
local folder; a folder gave exit 1 and a report of boot-fail cells)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import FIXTURES, ROOT, one_line_exit_2

pytestmark = pytest.mark.usefixtures("no_leftovers")

# Hides vLLM from every Python that sees this PYTHONPATH (the sweep and any server it
# would start): an import of it fails as if it were not installed.
NO_VLLM = '''
import importlib.abc, sys
class _NoVllm(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "vllm" or name.startswith("vllm."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None
sys.meta_path.insert(0, _NoVllm())
'''


@pytest.mark.parametrize("args, needle", [
    (("--residue", "3"), "unrecognized arguments: --residue 3 (did you mean --residues?)"),
    (("--resid", "3"), "unrecognized arguments: --resid 3"),
    (("--residues", "3,3"), "names residue 3 twice"),
    (("--residues", "0-5,3"), "names residue 3 twice"),
    (("--residues", "3,,4"), "'3,,4' has an empty item"),
    (("--residues", "3,"), "'3,' has an empty item"),
], ids=["abbrev", "abbrev-short", "twice", "twice-in-range", "empty", "trailing-comma"])
def test_a_mistyped_or_doubled_residue_flag_is_one_line(args, needle, cli):
    one_line_exit_2(cli(*args, "--dry-run"), needle)


def test_junit_in_a_folder_that_does_not_exist_creates_nothing(tmp_path, cli):
    missing = tmp_path / "nonexistent" / "dir"
    one_line_exit_2(cli("--junit", missing / "j.xml", "--residues", "3", "--dry-run"),
                    "--junit:", f"{missing} does not exist")
    assert not (tmp_path / "nonexistent").exists()
    one_line_exit_2(cli("report", ROOT / "tests/reports/fixtures/cmd/fake-break4.jsonl",
                        "-o", missing / "r.md"), "-o:", "does not exist")
    assert not (tmp_path / "nonexistent").exists()


@pytest.mark.parametrize("model", ["Qwen/Qwen3-0.6B", "local-folder"])
def test_engine_vllm_without_vllm_is_one_line_exit_3(tmp_path, model):
    hide = tmp_path / "hide"
    hide.mkdir()
    (hide / "sitecustomize.py").write_text(NO_VLLM)
    if model == "local-folder":
        model = str(FIXTURES / "tokenizer")
    out = tmp_path / "out"
    proc = subprocess.run(
        [sys.executable, "-m", "harness", "--engine", "vllm", "--model", model,
         "--residues", "3", "--out", str(out), "--reports-dir", str(tmp_path / "rep"),
         "--no-progress"], capture_output=True, text=True, timeout=120, cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(hide), str(ROOT)])})
    assert proc.returncode == 3, (proc.returncode, proc.stderr[-2000:])
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, lines
    assert "--engine vllm: vLLM is not installed in" in lines[0]
    assert not list(out.glob("*.jsonl")) and not (tmp_path / "rep").exists()


def test_a_model_name_the_server_does_not_serve_quotes_its_404(tmp_path):
    from tests.harness.test_live_url import UNPATCHED, sweep
    from tests.lab.labserver import lab_server
    with lab_server(UNPATCHED, tmp_path / "lab.log") as srv:
        proc = sweep("--url", srv.url, "--served-model-name", "wrong", "--residues", "3",
                     "--out", str(tmp_path / "out"))
    line = one_line_exit_2(proc, "model 'wrong'", "answered 404",
                           "The model `wrong` does not exist.", "--served-model-name")
    assert "no /tokenize" not in line


def test_the_full_graph_warning_is_a_warning_only_without_the_fix():
    """Issue 36: with the fix on, the preset still warned "without the prefill-
    discriminator fix residue k+1 is corrupted"."""
    from engine.presets import resolve
    on = resolve("mtp", "huge", cudagraph_mode="FULL_AND_PIECEWISE", patches="all")
    off = resolve("mtp", "huge", cudagraph_mode="FULL_AND_PIECEWISE", patches="none")
    other = resolve("mtp", "huge", cudagraph_mode="FULL_AND_PIECEWISE",
                    patches="sliding-window-guard")
    assert not [n for n in on.notes if n.startswith("WARNING")]
    assert any("with the prefill-discriminator fix on (patches=all)" in n for n in on.notes)
    for cfg in (off, other):
        (warn,) = [n for n in cfg.notes if n.startswith("WARNING")]
        assert "without the prefill-discriminator fix" in warn and "k+1=4 is corrupted" in warn


def test_sample_n_always_includes_k_plus_1_as_docs_flags_md_says():
    """docs/flags.md: "sampling always includes the rule's k + 1". Where the rule
    predicts no break (PIECEWISE, or the fix on) sample:5 left k + 1 out."""
    from engine.presets import resolve
    from harness.settings.configs import predicted_residues, select_residues
    for kw in ({"cudagraph_mode": "PIECEWISE"}, {"cudagraph_mode": "FULL_AND_PIECEWISE"},
               {"cudagraph_mode": "FULL_AND_PIECEWISE", "patches": "none"}):
        cfg = resolve("mtp", "huge", **kw)
        for seed in range(6):
            chosen, note = select_residues("sample:5", cfg, 128, seed=seed)
            assert len(chosen) == 5 and 4 in chosen, (kw, seed, chosen)
            assert set(predicted_residues(cfg, 128)) <= set(chosen)
            assert "NOT in the set" not in note
    assert select_residues("sample:1", resolve("mtp", "huge"), 128)[0] == [4]


def test_help_says_what_every_value_is(cli):
    """Issue 36: --help listed `live` and `risky` (and reset, shared, the engines, the
    presets, the references) without saying what they are. Every choice of a flag with
    choices, and every word of --residues / --reference / --spec / --ctx / --phases, is
    followed by its explanation in parentheses."""
    import re

    from harness.settings.flags import sweep_parser
    p = sweep_parser()
    words = {"--residues": ("all", "risky", "tails[:N]", "sample:N"),
             "--reference": ("passage", "cold", "first", "consensus", "golden:RUN"),
             "--spec": ("mtp", "dflash2", "ngram", "none"), "--ctx": ("fast", "long", "huge"),
             "--phases": ("cold", "warm", "self-hit")}
    for action in p._actions:
        name = action.option_strings[0] if action.option_strings else ""
        values = list(action.choices or ()) + list(words.get(name, ()))
        text = " ".join((action.help or "").split())
        for value in values:
            assert re.search(rf"(?<![\w-]){re.escape(str(value))} \(", text), (name, value, text)
    proc = cli("--help", env={**os.environ, "COLUMNS": "100"})
    assert proc.returncode == 0 and "live (what --url runs" in proc.stdout
    assert "risky (k, k+1, k+2" in proc.stdout
