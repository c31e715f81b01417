"""``--runner v1|v2|auto``: a matrix axis that reaches vLLM's launch environment, is
refused by the lab in one line, keeps every configuration id from before it existed,
records the runner a vLLM server ran on (from its committed H200 log), and makes the
rule line follow ``engine.vllm.patches.releases.dispatch_rule``."""
from __future__ import annotations

import glob
import gzip
import shlex

import pytest

from tests._vllm import missing

from engine.presets import resolve
from engine.vllm.patches.releases import dispatch_rule
from harness.judge.bugb import predict
from harness.command.cli import build_options
from harness.settings.configs import config_id
from harness.serve.engines import VllmAdapter
from harness.explain.plan import axis_changes
from harness.settings.flags import sweep_parser
from harness.records.store import read_jsonl
from tests.conftest import ROOT

H200 = ROOT / "reports" / "h200"


def options(argv):
    return build_options(sweep_parser().parse_args(argv), argv)


def test_runner_is_a_matrix_axis_that_reaches_the_launch_env(tmp_path):
    opts = options(["--engine", "vllm", "--model", str(tmp_path), "--runner", "v1,v2,auto"])
    assert [c.runner for c in opts.serving.configs] == ["v1", "v2", "auto"]
    assert len({config_id(c) for c in opts.serving.configs}) == 3
    adapter = VllmAdapter()
    envs = [adapter.command(c, 8000, opts.running.slots[0])[1] for c in opts.serving.configs]
    assert [e.get("VLLM_USE_V2_MODEL_RUNNER") for e in envs] == ["0", "1", None]
    assert "runner=v2" in opts.serving.configs[1].label() and "runner" not in opts.serving.configs[2].label()
    # the rerun spelling reparses to the same point
    from harness.settings.flags import rerun_command
    line = rerun_command(opts, opts.serving.configs[0], 4, 128)
    assert "--runner v1" in line
    again = options(shlex.split(line)[1:])
    assert [config_id(c) for c in again.serving.configs] == [config_id(opts.serving.configs[0])]
    assert "--runner" not in rerun_command(opts, opts.serving.configs[2], 4, 128)


def test_the_lab_has_one_runner(cli):
    for runner in ("v1", "v2"):
        proc = cli("--runner", runner, "--dry-run", timeout=60)
        assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
        assert "the lab engine has one model runner" in proc.stderr
    ok = cli("--runner", "auto", "--dry-run", timeout=60)
    assert ok.returncode == 0, ok.stderr
    assert axis_changes(resolve("mtp", "huge")) == axis_changes(resolve("mtp", "huge"), runners=())


def test_auto_keeps_every_committed_configuration_id():
    files = sorted(glob.glob(str(H200 / "results" / "*.jsonl.gz")))[:4]
    if not files:
        pytest.skip("no committed H200 records")
    from engine.presets import ServingConfig
    for path in files:
        rec = read_jsonl(path)[0]
        req = {k: v for k, v in rec["requested_config"].items() if k not in ("notes", "overrides")}
        assert config_id(ServingConfig(**req)) == rec["config_id"], path
    assert "runner" not in resolve("mtp", "huge").as_dict()


def test_the_record_names_the_runner_from_the_log():
    paths = sorted(glob.glob(str(H200 / "logs" / "fresh_FULL_AND_PIECEWISE__*.log.gz")))
    if not paths:
        pytest.skip("no committed H200 log")
    with gzip.open(paths[0], "rt", errors="replace") as fh:
        log = fh.read()
    cfg = resolve("ngram", "huge", engine="vllm", model="/m", geometry="hybrid", patches="none",
                  cudagraph_mode="FULL_AND_PIECEWISE")
    info = {"config": cfg.as_dict(), "engine_version": "0.26.0", "patch_status": None}
    VllmAdapter().refine(info, {}, log)
    assert info["config"]["model_runner"] == "v1"
    assert info["config"]["vllm_version"] == "0.26.0"
    pred = predict(info["config"], 128, patch_status={"prefill-discriminator": "off"})
    assert pred.residues == [4]
    assert "vLLM 0.26.0, V1 runner: uniform-decode dispatch decides by shape alone" in pred.why


def test_the_rule_line_follows_the_release_and_runner():
    base = resolve("ngram", "huge", engine="vllm", model="/m", geometry="hybrid",
                   patches="none", cudagraph_mode="FULL_AND_PIECEWISE").as_dict()
    v2 = predict({**base, "vllm_version": "0.28.0", "model_runner": "v2"}, 128)
    assert v2.residues == [] and "V2 runner" in v2.why and "has\\_prefill" in v2.why
    v1 = predict({**base, "vllm_version": "0.33.0", "model_runner": "v1"}, 128)
    assert v1.residues == [4] and "V1 runner" in v1.why
    forced = predict({**base, "vllm_version": "0.31.0", "runner": "v2"}, 128)
    assert forced.residues == [] and "decode\\_graph\\_eligible" in forced.why
    unknown = predict({**base, "vllm_version": "0.28.0"}, 128)   # no runner known
    assert unknown.residues == [4] and "runner" not in unknown.why
    lab = predict({**base, "engine": "lab", "vllm_version": "0.28.0", "model_runner": "v2"}, 128)
    assert lab.residues == [4]


def test_explain_tries_the_other_runner_on_vllm():
    cfg = resolve("ngram", "huge", engine="vllm", model="/m")
    labels = [c[1] for c in axis_changes(cfg, runners=VllmAdapter.runners, ran_on="v1")]
    assert "runner → v2" in labels and "runner → v1" not in labels
    labels = [c[1] for c in axis_changes(cfg, runners=VllmAdapter.runners)]
    assert {"runner → v1", "runner → v2"} <= set(labels)


def test_the_dry_run_rule_line_names_the_installed_release_and_runner(tmp_path, cli):
    from importlib.metadata import PackageNotFoundError, version
    try:
        release = version("vllm")
    except PackageNotFoundError:
        missing("vLLM is not installed")
    proc = cli("--engine", "vllm", "--model", tmp_path, "--spec", "ngram", "--geometry",
               "hybrid", "--cudagraph", "FULL_AND_PIECEWISE", "--patches", "none",
               "--runner", "v1,v2", "--dry-run", timeout=120)
    assert proc.returncode == 0, proc.stderr
    lines = [ln for ln in proc.stdout.splitlines() if "rule predicts" in ln]
    assert len(lines) == 2
    for line, runner in zip(lines, ("V1", "V2")):
        want = dispatch_rule(release, runner.lower(), "ngram").line()
        assert want in line, (want, line)
