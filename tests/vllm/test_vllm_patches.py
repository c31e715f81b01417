"""The patch plugin against vLLM 0.27.1's real classes, built without a GPU.

Each runner is created with ``object.__new__`` and given only the state its
classification path reads; the methods under test are vLLM's own. The cudagraph dispatch
that follows the classification is a recorder that stops the step, so what we observe is
exactly what vLLM would have dispatched on: the uniform token count (V2 runner) or the
``uniform_decode`` flag (V1 runner).

Bug B shape: a lone request whose final prefill chunk is ``1 + k`` tokens (k = 3 drafts,
prompt 1028 with a 1024-token prefix-cache hit) looks exactly like a spec-verify decode
step of one request.
"""
from __future__ import annotations

import ast
import importlib
import os
from types import SimpleNamespace

import numpy as np
import pytest

from tests._vllm import missing, require_vllm


require_vllm()

from engine.vllm import patches as P  # noqa: E402
from engine.vllm.patches import prefill_discriminator as PD  # noqa: E402
from engine.vllm.patches import sliding_window_guard as SW  # noqa: E402
from vllm.v1.core.sched.output import (CachedRequestData, NewRequestData,  # noqa: E402
                                       SchedulerOutput)

K = 3                     # draft tokens
QUERY = 1 + K             # decode / verify query length
PROMPT = 1028             # templated length ≡ k+1 (mod 128)
HIT = 1024                # prefix-cache hit, whole 128-token units


@pytest.fixture
def unpatched():
    P.restore_patches()  # vLLM may have loaded the plugin in this process already
    yield
    P.restore_patches()


@pytest.fixture
def patched():
    P.restore_patches()
    status = P.apply_patches("all")
    assert status == {"prefill-discriminator": "applied", "sliding-window-guard": "applied"}
    yield status
    P.restore_patches()


class Reached(Exception):
    """Raised by the recording dispatcher: the step got as far as dispatch."""

    def __init__(self, value):
        super().__init__(value)
        self.value = value


# ---------------------------------------------------------------- V2 runner
def sched(new=(), cached=(), num_scheduled=None):
    """A real SchedulerOutput. new: [(req_id, prompt_len, num_computed)];
    cached: [(req_id, num_computed)]; num_scheduled: {req_id: tokens}."""
    out = SchedulerOutput.make_empty()
    out.scheduled_new_reqs = [
        NewRequestData(req_id=r, prompt_token_ids=list(range(p)), mm_features=[],
                       sampling_params=None, pooling_params=None, block_ids=([],),
                       num_computed_tokens=c, lora_request=None,
                       prefill_token_ids=list(range(p)))
        for r, p, c in new]
    cr = CachedRequestData.make_empty()
    cr.req_ids = [r for r, _ in cached]
    cr.num_computed_tokens = [c for _, c in cached]
    cr.new_block_ids = [None for _ in cached]
    cr.num_output_tokens = [0 for _ in cached]
    out.scheduled_cached_reqs = cr
    out.num_scheduled_tokens = dict(num_scheduled)
    out.total_num_scheduled_tokens = sum(num_scheduled.values())
    out.finished_req_ids = set()
    return out


def v2_runner(existing=()):
    """V2 GPUModelRunner with a RequestState holding `existing` [(req_id, prefill_len,
    num_computed)]. RequestState's tensors need pinned memory, so its numpy mirrors (what
    update_requests and the discriminator read) are set directly."""
    from vllm.v1.worker.gpu.model_runner import GPUModelRunner
    from vllm.v1.worker.gpu.states import RequestState

    rs = object.__new__(RequestState)
    n = 8
    rs.req_id_to_index, rs.index_to_req_id = {}, {}
    rs.free_indices = list(range(n))
    rs.prefill_len = SimpleNamespace(np=np.zeros(n, dtype=np.int32))
    rs.num_computed_tokens_np = np.zeros(n, dtype=np.int32)
    rs.num_computed_prefill_tokens = np.zeros(n, dtype=np.int32)

    def add(req_id, prefill_len, computed):  # what RequestState.add_request records
        idx = rs.free_indices.pop()
        rs.req_id_to_index[req_id] = idx
        rs.prefill_len.np[idx] = prefill_len
        rs.num_computed_tokens_np[idx] = computed
        rs.num_computed_prefill_tokens[idx] = min(computed, prefill_len)

    for r in existing:
        add(*r)

    runner = object.__new__(GPUModelRunner)
    runner.req_states = rs
    runner.pp_handler = None
    runner.pooling_runner = None
    runner.encoder_cache = None
    runner.lora_config = None
    runner.is_encoder_decoder = False
    runner.dp_size, runner.dp_rank = 1, 0
    runner.block_tables = SimpleNamespace(apply_staged_writes=lambda: None)
    runner.kv_block_zeroer = None
    # add_requests builds model/sampler/LoRA state we do not have; keep only the request
    # bookkeeping it does (the real finish/free/update_requests run as they are).
    runner.add_requests = lambda so: [add(d.req_id, len(d.prefill_token_ids),
                                          d.num_computed_tokens)
                                      for d in so.scheduled_new_reqs]

    def dispatch(num_reqs, num_tokens, uniform_token_count, num_active_loras=0):
        raise Reached(uniform_token_count)

    runner.cudagraph_manager = SimpleNamespace(dispatch=dispatch)
    return runner


def v2_uniform(runner, so):
    with pytest.raises(Reached) as exc:
        runner.execute_model(so)
    return exc.value.value


def lone_tail_new():
    # first schedule after a cache hit: a new request, 1024 cached, 4-token tail
    return [], sched(new=[("r", PROMPT, HIT)], num_scheduled={"r": QUERY})


def lone_tail_cached():
    # last chunk of a chunked prefill: the request already exists in the runner
    return [("r", PROMPT, 512)], sched(cached=[("r", PROMPT - QUERY)],
                                       num_scheduled={"r": QUERY})


def decode_one():
    return [("r", PROMPT, PROMPT)], sched(cached=[("r", PROMPT + 5)], num_scheduled={"r": QUERY})


def decode_two():
    return ([("a", PROMPT, PROMPT), ("b", 300, 300)],
            sched(cached=[("a", PROMPT + 1), ("b", 301)], num_scheduled={"a": QUERY, "b": QUERY}))


def mixed_two():
    return ([("a", PROMPT, PROMPT)],
            sched(new=[("b", PROMPT, HIT)], cached=[("a", PROMPT + 1)],
                  num_scheduled={"a": QUERY, "b": QUERY}))


PREFILL_CASES = {"lone-tail-new": lone_tail_new, "lone-tail-cached": lone_tail_cached,
                 "decode+tail": mixed_two}
DECODE_CASES = {"decode-one": decode_one, "decode-two": decode_two}


@pytest.mark.parametrize("case", list(PREFILL_CASES))
def test_v2_unpatched_calls_prefill_tail_uniform_decode(unpatched, case):
    existing, so = PREFILL_CASES[case]()
    assert v2_uniform(v2_runner(existing), so) == QUERY  # Bug B, by shape alone


@pytest.mark.parametrize("case", list(PREFILL_CASES))
def test_v2_patched_prefill_tail_is_not_uniform(patched, case):
    existing, so = PREFILL_CASES[case]()
    assert v2_uniform(v2_runner(existing), so) is None


@pytest.mark.parametrize("case", list(DECODE_CASES))
def test_v2_decode_stays_uniform(patched, case):
    existing, so = DECODE_CASES[case]()
    assert v2_uniform(v2_runner(existing), so) == QUERY


def test_v2_classifier_outside_a_step_is_unchanged(patched):
    import vllm.v1.worker.gpu.model_runner as mr

    assert mr.get_uniform_token_count(1, QUERY, QUERY) == QUERY
    assert mr.get_uniform_token_count(2, 5, 4) is None


# ---------------------------------------------------------------- V1 runner
@pytest.fixture
def v1_input_batch(monkeypatch):
    """A real InputBatch on CPU (its buffers pin memory unless told not to)."""
    import torch
    import vllm.v1.worker.gpu_input_batch as gib
    from vllm.sampling_params import SamplingParams

    monkeypatch.setattr(gib, "PIN_MEMORY", False)

    def make(reqs):
        batch = gib.InputBatch(max_num_reqs=8, max_model_len=4096, max_num_batched_tokens=2048,
                               device=torch.device("cpu"), vocab_size=1000,
                               block_sizes=[128], kernel_block_sizes=[128],
                               max_num_blocks_per_req=[32])
        for req_id, prompt, computed in reqs:
            batch.add_request(gib.CachedRequestState(
                req_id=req_id, prompt_token_ids=list(range(prompt)), mm_features=[],
                sampling_params=SamplingParams(max_tokens=16), generator=None, block_ids=([],),
                num_computed_tokens=computed, output_token_ids=[]))
        return batch

    return make


def v1_runner(batch):
    from vllm.v1.worker.gpu_model_runner import GPUModelRunner

    runner = object.__new__(GPUModelRunner)
    runner.input_batch = batch
    runner.uniform_decode_query_len = QUERY
    runner.model_config = SimpleNamespace(is_encoder_decoder=False)
    runner.compilation_config = SimpleNamespace(pass_config=SimpleNamespace(enable_sp=False))
    runner.vllm_config = SimpleNamespace(parallel_config=SimpleNamespace(
        tensor_parallel_size=1, data_parallel_size=1))

    def dispatch(num_tokens, has_lora, uniform_decode, num_active_loras,
                 valid_modes=None, invalid_modes=None):
        raise Reached(uniform_decode)

    runner.cudagraph_dispatcher = SimpleNamespace(dispatch=dispatch)
    return runner


def v1_uniform(runner, num_scheduled, force=None):
    tokens = np.array(num_scheduled, dtype=np.int32)
    with pytest.raises(Reached) as exc:
        runner._determine_batch_execution_and_padding(
            num_tokens=int(tokens.sum()), num_reqs=len(tokens),
            num_scheduled_tokens_np=tokens, max_num_scheduled_tokens=int(tokens.max()),
            use_cascade_attn=False, force_uniform_decode=force)
    return exc.value.value


V1_PREFILL = {"lone-tail": [("r", PROMPT, HIT)],
              "decode+tail": [("a", PROMPT, PROMPT + 1), ("b", PROMPT, PROMPT - QUERY)]}
V1_DECODE = {"decode-one": [("r", PROMPT, PROMPT)],
             "decode-two": [("a", PROMPT, PROMPT + 7), ("b", 300, 301)]}


@pytest.mark.parametrize("case", list(V1_PREFILL))
def test_v1_unpatched_calls_prefill_tail_uniform_decode(unpatched, v1_input_batch, case):
    reqs = V1_PREFILL[case]
    assert v1_uniform(v1_runner(v1_input_batch(reqs)), [QUERY] * len(reqs)) is True


@pytest.mark.parametrize("case", list(V1_PREFILL))
def test_v1_patched_prefill_tail_is_not_uniform(patched, v1_input_batch, case):
    reqs = V1_PREFILL[case]
    assert v1_uniform(v1_runner(v1_input_batch(reqs)), [QUERY] * len(reqs)) is False


@pytest.mark.parametrize("case", list(V1_DECODE))
def test_v1_decode_stays_uniform(patched, v1_input_batch, case):
    reqs = V1_DECODE[case]
    assert v1_uniform(v1_runner(v1_input_batch(reqs)), [QUERY] * len(reqs)) is True


def test_v1_capture_keeps_its_forced_answer(patched, v1_input_batch):
    runner = v1_runner(v1_input_batch(V1_PREFILL["lone-tail"]))
    assert v1_uniform(runner, [QUERY], force=True) is True
    from vllm.v1.worker.gpu_model_runner import GPUModelRunner

    # the bare staticmethod, outside a step, answers by shape as before
    assert GPUModelRunner._is_uniform_decode(QUERY, QUERY, QUERY, 1) is True


# ---------------------------------------------------------------- shape refusals
def test_refuses_a_changed_v2_classifier_and_rolls_back(unpatched, monkeypatch):
    import vllm.v1.worker.gpu.cudagraph_utils as cg
    import vllm.v1.worker.gpu.model_runner as mr
    from vllm.v1.worker.gpu_model_runner import GPUModelRunner as V1

    def get_uniform_token_count(num_reqs, num_tokens, max_query_len, padded):
        return None

    monkeypatch.setattr(mr, "get_uniform_token_count", get_uniform_token_count)
    monkeypatch.setattr(cg, "get_uniform_token_count", get_uniform_token_count)
    v1_before = V1.__dict__["_is_uniform_decode"]
    status = P.apply_patches("prefill-discriminator")
    assert status["prefill-discriminator"].startswith("refused: v2-runner: ShapeMismatch")
    assert status["sliding-window-guard"] == "off"
    assert mr.get_uniform_token_count is get_uniform_token_count  # untouched
    assert V1.__dict__["_is_uniform_decode"] is v1_before  # nothing half-applied


def test_an_upstream_fixed_v2_classifier_is_not_needed(unpatched, monkeypatch):
    import vllm.v1.worker.gpu.cudagraph_utils as cg
    import vllm.v1.worker.gpu.model_runner as mr

    def get_uniform_token_count(num_reqs, num_tokens, max_query_len, is_prefilling):
        return None

    monkeypatch.setattr(mr, "get_uniform_token_count", get_uniform_token_count)
    monkeypatch.setattr(cg, "get_uniform_token_count", get_uniform_token_count)
    status = P.apply_patches("prefill-discriminator")
    assert status["prefill-discriminator"] == "applied"  # V1 still needs it
    m = P.patch_manifest()["patches"]["prefill-discriminator"]["targets"]
    assert m["v2-runner"].startswith("not-needed") and m["v1-runner"].startswith("applied")


def test_refuses_a_changed_v1_classifier(unpatched, monkeypatch):
    from vllm.v1.worker.gpu_model_runner import GPUModelRunner as V1

    def _is_uniform_decode(max_num_scheduled_tokens, uniform_decode_query_len, num_tokens):
        return False

    monkeypatch.setattr(V1, "_is_uniform_decode", staticmethod(_is_uniform_decode))
    status = P.apply_patches("prefill-discriminator")
    assert status["prefill-discriminator"].startswith("refused: v1-runner")
    import vllm.v1.worker.gpu.model_runner as mr

    assert not hasattr(mr.get_uniform_token_count, PD.PATCH_MARK)  # V2 rolled back


# ---------------------------------------------------------------- sliding-window guard
def sw_args(block_size, alignment):
    import torch
    from vllm.v1.core.block_pool import BlockPool
    from vllm.v1.kv_cache_interface import SlidingWindowSpec

    spec = SlidingWindowSpec(block_size=block_size, num_kv_heads=1, head_size=8,
                             dtype=torch.float16, sliding_window=4096)
    pool = BlockPool(num_gpu_blocks=16, enable_caching=True, hash_block_size=128)
    hashes = [bytes([i]) * 32 for i in range(4096 // 128)]  # nothing cached under these
    return dict(block_hashes=hashes, max_length=4096, kv_cache_group_ids=[1], block_pool=pool,
                kv_cache_spec=spec, drop_eagle_block=False, alignment_tokens=alignment)


def test_sliding_window_unpatched_asserts_on_promoted_block(unpatched):
    from vllm.v1.core.single_type_kv_cache_manager import SlidingWindowManager

    with pytest.raises(AssertionError, match="fine-grained"):
        SlidingWindowManager.find_longest_cache_hit(**sw_args(2048, 128))


def test_sliding_window_patched_returns_a_clean_miss(patched):
    from vllm.v1.core.single_type_kv_cache_manager import SlidingWindowManager

    blocks, hit = SlidingWindowManager.find_longest_cache_hit(**sw_args(2048, 128))
    assert hit == 0 and blocks == ([],)
    # an aligned group still goes through vLLM's own lookup (empty cache: a miss)
    blocks, hit = SlidingWindowManager.find_longest_cache_hit(**sw_args(128, 2048))
    assert hit == 0 and [list(b) for b in blocks] == [[]]


def test_sliding_window_without_the_assert_is_not_patched(unpatched, monkeypatch):
    from vllm.v1.core.single_type_kv_cache_manager import SlidingWindowManager

    def find_longest_cache_hit(cls, block_hashes, max_length, kv_cache_group_ids, block_pool,
                               kv_cache_spec, drop_eagle_block, alignment_tokens,
                               dcp_world_size=1, pcp_world_size=1):
        if alignment_tokens % kv_cache_spec.block_size != 0:
            return tuple([] for _ in kv_cache_group_ids), 0  # upstream-style fallback
        return tuple([] for _ in kv_cache_group_ids), 0

    fake = classmethod(find_longest_cache_hit)
    monkeypatch.setattr(SlidingWindowManager, "find_longest_cache_hit", fake)
    status = P.apply_patches("sliding-window-guard")
    assert status["sliding-window-guard"].startswith("not-needed")
    assert SlidingWindowManager.__dict__["find_longest_cache_hit"] is fake


def test_sliding_window_refuses_a_changed_signature(unpatched, monkeypatch):
    from vllm.v1.core.single_type_kv_cache_manager import SlidingWindowManager

    def find_longest_cache_hit(cls, block_hashes, max_length, spec):
        return (), 0

    monkeypatch.setattr(SlidingWindowManager, "find_longest_cache_hit",
                        classmethod(find_longest_cache_hit))
    status = P.apply_patches("sliding-window-guard")
    assert status["sliding-window-guard"].startswith("refused: sliding-window-manager")


def test_the_installed_assert_is_the_one_the_guard_expects():
    import inspect
    from vllm.v1.core.single_type_kv_cache_manager import SlidingWindowManager

    src = inspect.getsource(SlidingWindowManager.find_longest_cache_hit)
    tree = ast.parse(__import__("textwrap").dedent(src))
    assert sum(SW._is_alignment_assert(n) for n in ast.walk(tree)) == 1


# ---------------------------------------------------------------- switch, status, plugin
def test_env_none_disables_everything(unpatched, monkeypatch):
    import vllm.v1.worker.gpu.model_runner as mr
    from vllm.v1.core.single_type_kv_cache_manager import SlidingWindowManager

    monkeypatch.setenv("RESIDUE_LAB_PATCHES", "none")
    before = SlidingWindowManager.__dict__["find_longest_cache_hit"]
    P.register()
    assert P.patch_status() == {"prefill-discriminator": "off", "sliding-window-guard": "off"}
    assert not hasattr(mr.get_uniform_token_count, PD.PATCH_MARK)
    assert SlidingWindowManager.__dict__["find_longest_cache_hit"] is before


def test_env_unset_patches_nothing(unpatched, monkeypatch):
    """Issue 33 item 12: the entry point loads in every vLLM process of an environment with
    residue-lab installed; a server nobody asked to patch (the variable unset, as in a
    user's own serving stack) runs vLLM as shipped, and its log line says why."""
    import vllm.v1.worker.gpu.model_runner as mr
    from vllm.v1.core.single_type_kv_cache_manager import SlidingWindowManager

    monkeypatch.delenv("RESIDUE_LAB_PATCHES", raising=False)
    before = SlidingWindowManager.__dict__["find_longest_cache_hit"]
    P.register()
    assert P.patch_status() == {name: f"off: {P.NOT_ASKED}" for name in P.PATCH_NAMES}
    assert P.patch_manifest()["selection"] == "unset"
    assert not hasattr(mr.get_uniform_token_count, PD.PATCH_MARK)
    assert SlidingWindowManager.__dict__["find_longest_cache_hit"] is before
    P.restore_patches()
    monkeypatch.setenv("RESIDUE_LAB_PATCHES", "all")   # asked by name: applied
    assert set(P.patch_status().values()) == {"applied"}


def test_env_selects_one_and_rejects_unknown(unpatched, monkeypatch):
    monkeypatch.setenv("RESIDUE_LAB_PATCHES", "sliding-window-guard")
    assert P.patch_status() == {"prefill-discriminator": "off",
                                "sliding-window-guard": "applied"}
    P.restore_patches()
    monkeypatch.setenv("RESIDUE_LAB_PATCHES", "prefill-discriminator,bogus")
    status = P.patch_status()
    assert all(v.startswith("refused: unknown patch") for v in status.values())


def test_apply_is_idempotent_and_logs_one_parsable_line(unpatched, caplog):
    import logging

    from engine.vllm.effective import patch_status_from_log

    with caplog.at_level(logging.INFO, logger="vllm.residue_lab.patches"):
        logging.getLogger("vllm.residue_lab.patches").propagate = True
        first = P.apply_patches("all")
        assert P.apply_patches("all") == first
    lines = [r.getMessage() for r in caplog.records if "residue-lab patches" in r.getMessage()]
    assert len(lines) == 1
    assert patch_status_from_log("INFO 08-22 [x.py:1] " + lines[0]) == first
    manifest = P.patch_manifest()
    assert manifest["vllm_version"] in P.CHECKED_AGAINST["sliding-window-guard"]
    assert manifest["patches"]["sliding-window-guard"]["checked_against"][0] == "0.27.1"


def test_vllm_loader_finds_and_runs_the_plugin(unpatched, tmp_path, monkeypatch):
    """vLLM's own entry-point loader, pointed at a dist-info like the one pip writes."""
    from engine.vllm.launch import write_plugin_dist_info
    from vllm.plugins import DEFAULT_PLUGINS_GROUP, load_plugins_by_group

    write_plugin_dist_info(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delenv("VLLM_PLUGINS", raising=False)
    monkeypatch.setenv("RESIDUE_LAB_PATCHES", "all")   # as the harness sets it for its servers
    plugins = load_plugins_by_group(DEFAULT_PLUGINS_GROUP)
    assert plugins.get("residue_lab_patches") is P.register
    plugins["residue_lab_patches"]()
    assert P.patch_status()["prefill-discriminator"] == "applied"


def test_installed_distribution_declares_the_entry_point():
    from importlib.metadata import PackageNotFoundError, distribution

    try:
        dist = distribution("residue-lab")
    except PackageNotFoundError:
        missing("residue-lab is not pip-installed here")
    # pyproject.toml declares it: an install without it is stale (reinstall), never a skip
    eps = [e for e in dist.entry_points if e.group == "vllm.general_plugins"]
    assert [(e.name, e.value) for e in eps] == [("residue_lab_patches",
                                                 "engine.vllm.patches:register")]


def test_status_cli_reports_every_patch(unpatched, capsys):
    from engine.vllm.patches.__main__ import main

    assert main(["--status"]) == 0
    out = capsys.readouterr().out
    assert "| prefill-discriminator | applied |" in out
    assert "| sliding-window-guard | applied |" in out


def test_static_check_of_the_installed_tree():
    import vllm

    from engine.vllm.patches._static import check_source_tree

    site = os.path.dirname(os.path.dirname(vllm.__file__))
    assert set(check_source_tree(site).values()) == {"applied"}


# ---------------------------------------------------------------- V1: resumed requests (#13)
# A request preempted after 28 output tokens resumes with a 1,024-token hit: it must
# recompute prompt 1,000 + 28 outputs = 1,028 tokens (V2's prefill_len), so its final
# chunk is again 1 + k tokens although num_computed (1,024) is past its prompt (1,000).
RESUMED_PROMPT, RESUMED_OUTPUTS = 1000, 28


def resumed_runner(computed):
    """A V1 runner whose real InputBatch holds the resumed request (outputs restored, as
    _update_states does) and the real SchedulerOutput that resumed it."""
    import torch
    import vllm.v1.worker.gpu_input_batch as gib
    from vllm.sampling_params import SamplingParams

    state = gib.CachedRequestState(
        req_id="r", prompt_token_ids=list(range(RESUMED_PROMPT)), mm_features=[],
        sampling_params=SamplingParams(max_tokens=64), generator=None, block_ids=([],),
        num_computed_tokens=computed, output_token_ids=list(range(RESUMED_OUTPUTS)))
    batch = gib.InputBatch(max_num_reqs=8, max_model_len=4096, max_num_batched_tokens=2048,
                           device=torch.device("cpu"), vocab_size=1000,
                           block_sizes=[128], kernel_block_sizes=[128],
                           max_num_blocks_per_req=[32])
    batch.add_request(state)
    runner = v1_runner(batch)
    runner.requests = {"r": state}
    out = sched(cached=[("r", computed)], num_scheduled={"r": QUERY})
    out.scheduled_cached_reqs.resumed_req_ids = {"r"}
    out.scheduled_cached_reqs.num_output_tokens = [RESUMED_OUTPUTS]
    return runner, out


@pytest.fixture
def v1_no_pinned_memory(monkeypatch):
    import vllm.v1.worker.gpu_input_batch as gib

    monkeypatch.setattr(gib, "PIN_MEMORY", False)


def test_v1_patch_wraps_update_states(patched):
    from vllm.v1.worker.gpu_model_runner import GPUModelRunner

    wrapped = GPUModelRunner._update_states
    assert getattr(wrapped, PD.PATCH_MARK) == PD.NAME
    assert wrapped.__wrapped__.__qualname__ == "GPUModelRunner._update_states"


def test_v1_resumed_request_recomputing_its_outputs_is_not_uniform(patched,
                                                                   v1_no_pinned_memory):
    runner, out = resumed_runner(computed=1024)
    assert PD.v1_batch_has_prefill(runner, 1) is False  # before: only the prompt counted
    PD.v1_note_resumed(runner, out)                      # what the _update_states wrapper adds
    assert runner.__dict__[PD.RESUMED_PREFILL_LEN] == {"r": RESUMED_PROMPT + RESUMED_OUTPUTS}
    assert v1_uniform(runner, [QUERY]) is False


def test_v1_resumed_request_decodes_once_recomputed(patched, v1_no_pinned_memory):
    runner, out = resumed_runner(computed=RESUMED_PROMPT + RESUMED_OUTPUTS)
    PD.v1_note_resumed(runner, out)
    assert v1_uniform(runner, [QUERY]) is True


def test_v1_resumed_note_is_dropped_when_the_request_finishes(patched, v1_no_pinned_memory):
    runner, out = resumed_runner(computed=1024)
    PD.v1_note_resumed(runner, out)
    done = sched(num_scheduled={"x": 1})
    done.finished_req_ids = {"r"}
    PD.v1_note_resumed(runner, done)
    assert runner.__dict__[PD.RESUMED_PREFILL_LEN] == {}


def test_v2_runner_with_a_prefill_aware_classifier_is_not_needed(unpatched, monkeypatch):
    """The 0.28.0 shape (PR #51865): the runner imports get_uniform_decode_token_count(...,
    has_prefill) and no get_uniform_token_count; V2 is left alone, V1 still patched."""
    import vllm.v1.worker.gpu.model_runner as mr

    def get_uniform_decode_token_count(num_reqs, num_tokens, max_query_len, has_prefill):
        return None if has_prefill else max_query_len

    monkeypatch.delattr(mr, "get_uniform_token_count")
    monkeypatch.setattr(mr, "get_uniform_decode_token_count",
                        get_uniform_decode_token_count, raising=False)
    status = P.apply_patches("prefill-discriminator")
    assert status["prefill-discriminator"] == "applied"
    targets = P.patch_manifest()["patches"]["prefill-discriminator"]["targets"]
    assert targets["v2-runner"].startswith("not-needed: get_uniform_decode_token_count")
    assert targets["v1-runner"].startswith("applied")
    assert mr.get_uniform_decode_token_count is get_uniform_decode_token_count
