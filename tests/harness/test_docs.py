"""The README is the user's page and the references live in docs/: what the README and
docs/flags.md claim is checked against the code that owns it (flags, presets, the
reference table), and every path the README links to exists."""
import json
import re
import struct
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()
FLAGS_MD = (ROOT / "docs" / "flags.md").read_text()


def _section(text: str, heading: str) -> str:
    """The body of the `## heading` section (up to the next `## `)."""
    start = text.index(f"\n## {heading}\n")
    end = text.find("\n## ", start + 1)
    return text[start:end if end > 0 else len(text)]


def test_the_readme_opens_with_exactly_two_commands():
    """Two set-up commands, first: one sweep on the lab engine, one test run."""
    body = _section(README, "Two commands")
    block = re.search(r"```bash\n(.*?)```", body, re.S).group(1)
    lines = [line for line in block.splitlines() if line.strip()]
    assert len(lines) == 2
    assert lines[0].startswith("pip install -e . && sweep ") and "--engine" not in lines[0]
    assert lines[1].startswith("pip install -e '.[test]' && pytest")
    assert re.search(r"^## .*$", README, re.M).group(0) == "## Two commands"


def test_the_readme_defines_its_terms_where_first_used():
    for term, definition in (("Bug B", "**Bug B**"), ("the thread", "(**the thread**"),
                             ("CTX=huge", "**`CTX=huge`**")):
        first = README.index(term)
        assert README.index(definition) <= first + len(definition), term


def test_your_gpu_section_names_the_spec_for_a_headless_model_and_both_vllm_versions():
    import tomllib
    body = _section(README, "Your GPU and your model")
    pins = tomllib.loads((ROOT / "pyproject.toml").read_text())
    extra = pins["project"]["optional-dependencies"]["vllm"]
    assert extra == ["vllm==0.27.1"] and "vLLM 0.27.1" in body and "vllm==0.27.1" in body
    assert "vLLM 0.26.0" in body and "**`--spec ngram`**" in body


def test_the_mtp_refusal_names_ngram_as_the_readme_says(tmp_path):
    """README: on a model without an MTP head, `--spec mtp` is refused and the line
    points at `--spec ngram`."""
    from engine.vllm.checkpoint import mtp_head_problem
    header = json.dumps({"model.w": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}})
    (tmp_path / "model.safetensors").write_bytes(
        struct.pack("<Q", len(header)) + header.encode() + bytes(4))
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "qwen3"}))
    assert "use --spec ngram" in mtp_head_problem(tmp_path)


def test_every_sweep_flag_is_in_the_flag_reference(cli):
    """Every option `sweep --help` lists is in docs/flags.md."""
    proc = cli("--help", timeout=60)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    names = set(re.findall(r"(?<![\w-])(--[a-z][\w-]*)", out)) - {"--help"}
    assert len(names) > 30
    missing = sorted(n for n in names if not re.search(re.escape(n) + r"(?![\w-])", FLAGS_MD))
    assert not missing, f"docs/flags.md does not mention {missing}"


def test_the_flag_reference_says_each_engines_defaults_as_its_adapter():
    """docs/flags.md states the per-engine defaults --help builds from the adapters: it
    names the adapter's fact, defers to ``sweep --help`` for the list, and each engine it
    lists has its adapter's value (lab, vllm and cmd at least; an engine added to
    ``ADAPTERS`` later is in --help without an edit here)."""
    from harness.serve.engine_help import engines_where
    from harness.serve.engine_help import can_fork
    from harness.serve.engines import ADAPTERS
    for fact, tail in (("boot_timeout_s", " s)"), ("logprobs_default", "; 0 = off)")):
        lead = f"(default per engine, its adapter's `{fact}` as `sweep --help` lists it: "
        listed = FLAGS_MD.split(lead, 1)[1].split(tail, 1)[0]
        said = dict(item.rsplit(" ", 1) for item in listed.split(", "))
        assert {"lab", "vllm", "cmd"} <= set(said), said
        assert said == {n: f"{getattr(ADAPTERS[n], fact):g}" for n in said}, fact
    forks = " or ".join(f"`{n}`" if i else f"`--engine {n}`"
                        for i, n in enumerate(engines_where(can_fork).split(" or ")))
    assert f"imported the engine once ({forks};" in FLAGS_MD


def test_the_reference_table_says_what_the_report_says():
    from harness.report.divergence import REFERENCE_SIGHT
    for ref, (sees, misses) in REFERENCE_SIGHT.items():
        row = next(line for line in FLAGS_MD.splitlines()
                   if line.startswith(f"| `{ref}") and "|" in line[2:])
        assert sees in row and misses in row, ref


def test_the_preset_table_in_the_docs_is_the_code_s():
    from engine.presets import preset_table_markdown
    assert preset_table_markdown() in (ROOT / "docs" / "vllm-stack.md").read_text()


@pytest.mark.parametrize("path", sorted(set(re.findall(
    r"`((?:docs|reports|benchmarks|examples|engine|tests)/[\w./-]+|action\.yml|\.ci/run)`",
    README))))
def test_every_path_the_readme_names_exists(path):
    assert (ROOT / path).exists(), path


def test_the_readme_says_the_python_and_the_venv_before_the_two_commands():
    """Issue 36: the README said neither the Python it needs nor to make a venv."""
    import tomllib
    body = _section(README, "Two commands")
    before = body.split("```bash", 1)[0]
    need = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["requires-python"]
    assert need == ">=3.11" and "Python ≥ 3.11" in before
    assert "python3 -m venv .venv && . .venv/bin/activate" in before
