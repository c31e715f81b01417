"""Servers across GPUs: a slot is a GPU group (``--gpus 0+1,2+3``), its size the TP size
passed to the engine (``--tensor-parallel-size``); a TP size without a group is refused.
The lab records the size and the devices it was given (it shards nothing), so the whole
path runs on the CPU; the Ray claim is in tests/ray."""
from __future__ import annotations

import shlex

import pytest

from engine.lab.cli import check_args, config_from_args
from engine.presets import resolve
from engine.vllm.effective import parse_effective_config
from harness.settings.configs import parse_slots
from harness.serve.engines import CmdAdapter, LabAdapter, make_adapter
from harness.errors import UsageError
from harness.options import options_from_argv
from harness.serve.slots import Slot
from tests.conftest import one_line_exit_2


def test_a_group_is_one_slot_of_several_gpus():
    slots = parse_slots(None, "0+1,2+3", 1)
    assert [(s.id, s.gpu, s.tensor_parallel_size) for s in slots] == [
        ("gpu0+1", "0,1", 2), ("gpu2+3", "2,3", 2)]
    assert [s.tensor_parallel_size for s in parse_slots(None, "0,1", 1)] == [1, 1]
    assert parse_slots(None, "0+1,0+1", 1)[1].id == "gpu0+1.1"   # two servers on one group
    assert Slot("cpu0").tensor_parallel_size == 1


@pytest.mark.parametrize("gpus, needle", [
    ("0+1,2", "every group must have as many GPUs"),
    ("0+0", "GPU 0 is named twice in the group 0+0"),
    ("0+1,1+2", "GPU 1 is in two groups (0+1 and 1+2)"),
    ("0+", "is not valid"),
    ("a+b", "is not valid"),
])
def test_a_bad_group_is_a_usage_error(gpus, needle):
    with pytest.raises(UsageError) as e:
        parse_slots(None, gpus, 1)
    assert needle in str(e.value)


def test_the_engines_get_the_groups_tp_size(tmp_path):
    group, one = Slot("gpu0+1", "0,1"), Slot("gpu0", "0")
    lab_cfg = resolve("mtp", "huge", engine="lab")
    argv, _ = LabAdapter().command(lab_cfg, 8000, group)
    assert argv[argv.index("--tensor-parallel-size") + 1] == "2"
    assert "--tensor-parallel-size" not in LabAdapter().command(lab_cfg, 8000, one)[0]
    vllm = make_adapter("vllm", isolation="fresh", work_dir=tmp_path)
    cfg = resolve("ngram", "huge", engine="vllm", model="/m", patches="none")
    argv, env = vllm.command(cfg, 8000, group)
    assert argv[argv.index("--tensor-parallel-size") + 1] == "2"
    assert env["CUDA_VISIBLE_DEVICES"] == "0,1"
    assert "--tensor-parallel-size" not in vllm.command(cfg, 8000, one)[0]
    cmd = CmdAdapter("srv --port {port} --tp {tp} --devices {gpu}")
    assert cmd.command(cfg, 8000, group) == (
        ["srv", "--port", "8000", "--tp", "2", "--devices", "0,1"],
        {"CUDA_VISIBLE_DEVICES": "0,1"})


def test_the_rerun_line_keeps_the_group(tmp_path):
    from harness.settings.flags import rerun_command
    opts = options_from_argv(["--engine", "vllm", "--model", str(tmp_path),
                              "--gpus", "2+3,4+5"])
    line = rerun_command(opts, opts.serving.configs[0], 4, 128)
    assert "--gpus 2+3" in line and "--slots" not in line
    again = options_from_argv(shlex.split(line)[1:])
    assert [s.tensor_parallel_size for s in again.running.slots] == [2]
    plain = options_from_argv(["--engine", "vllm", "--model", str(tmp_path), "--gpus", "0,1"])
    assert "--slots 1" in rerun_command(plain, plain.serving.configs[0], 4, 128)


def test_the_lab_records_the_tp_size_and_refuses_more_than_its_devices():
    cfg = config_from_args(["--tensor-parallel-size", "2"], devices="4,5")
    eff = cfg.effective()
    assert (eff["tensor_parallel_size"], eff["visible_devices"]) == (2, "4,5")
    # one slot's server reports as it always did (no new keys)
    plain = config_from_args([], devices="0").effective()
    assert "tensor_parallel_size" not in plain and "visible_devices" not in plain
    with pytest.raises(SystemExit) as e:
        config_from_args(["-tp", "2"], devices="0")
    assert e.value.code == 2
    # check_args (the harness's check before any server) does not know the devices
    assert check_args(["--tensor-parallel-size", "2"]) is None


def test_vllms_log_says_the_tp_size_it_runs():
    line = ("(EngineCore_DP0 pid=1) INFO 12-01 10:00:00 [core.py:94] Initializing a V1 LLM "
            "engine (v0.27.1) with config: model='/m', speculative_config=None, "
            "tokenizer='/m', max_seq_len=4096, tensor_parallel_size=2, "
            "pipeline_parallel_size=1, data_parallel_size=1, seed=0\n")
    assert parse_effective_config(line)["tensor_parallel_size"] == 2
    assert "tensor_parallel_size" not in parse_effective_config(
        line.replace("tensor_parallel_size=2", "tensor_parallel_size=1"))


@pytest.mark.parametrize("arg", ["--engine-arg=--tensor-parallel-size=2",
                                 "--engine-arg=-tp=2", "--engine-arg=-tp2"])
def test_a_tp_size_without_a_group_is_one_line_exit_2(cli, arg):
    line = one_line_exit_2(cli(arg, "--residues", "3"), "the tensor-parallel size comes from "
                           "the GPU groups", "--gpus 0+1,2+3")
    assert arg.split("=", 1)[1] in line


def test_a_lab_sweep_across_gpu_groups_records_each_group(cli):
    cli.sweep("--gpus", "0+1,2+3", "--residues", "3,4", "--spec", "mtp",
                     "--patches", "none", "--cudagraph", "FULL_AND_PIECEWISE", rc=1)
    recs = cli.records()
    assert len(recs) == 4
    by_slot = {r["slot"]: r["config"] for r in recs}
    assert set(by_slot) == {"gpu0+1", "gpu2+3"}
    for slot, config in by_slot.items():
        assert config["tensor_parallel_size"] == 2
        assert config["visible_devices"] == slot[3:].replace("+", ",")
    # the lab's Bug B is the same with the group as without (it shards nothing)
    assert {(r["residue"], r["phase"]): r["verdict"] for r in recs}[(4, "self-hit")] == "broken"
    assert all(r["rerun"].endswith("--gpus 0+1") for r in recs)
