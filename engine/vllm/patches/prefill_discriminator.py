"""Bug B fix: a batch in which a scheduled request has not finished its prompt is not a
uniform decode batch, in both of vLLM's model runners.

Both classifiers decide by shape alone (``num_tokens == num_reqs * (1 + k)``), so a lone
request whose final prefill chunk is exactly ``1 + k`` tokens (only a prefix-cache hit cuts
the tail that short) is dispatched as a spec-verify decode step and replays the FULL CUDA
graph captured for one, over prompt tokens (DESIGN §1).

The classifiers do not see request state, so we bring it to them:

- V2 runner (``vllm/v1/worker/gpu/model_runner.py``): ``execute_model`` updates the request
  states (``update_requests`` refreshes ``req_states.num_computed_prefill_tokens``) and then
  calls the module-level ``get_uniform_token_count``. We wrap ``execute_model`` to publish
  ``(runner, scheduler_output)`` in a context variable for the duration of the call, and
  replace the model runner module's ``get_uniform_token_count`` with a wrapper that returns
  ``None`` (not uniform) when any scheduled request still has
  ``num_computed_prefill_tokens < prefill_len``, which is the discriminator newer vLLM
  applies upstream. Dummy/capture runs are left untouched.
- V1 runner (``vllm/v1/worker/gpu_model_runner.py``): ``_determine_batch_execution_and_padding``
  calls the staticmethod ``_is_uniform_decode``. We wrap the former to publish the runner,
  and the latter to answer ``False`` when any request in the persistent batch has
  ``num_computed_tokens_cpu`` short of its *prefill length*: the prompt, or, for a request
  resumed after preemption, the prompt plus the output tokens it must recompute. That is
  V2's ``prefill_len`` (``len(all_token_ids)`` when the request is (re)added); V1's batch
  does not keep it, so we also wrap ``_update_states`` to note ``num_prompt_tokens +
  num_output_tokens`` for each id in ``scheduled_cached_reqs.resumed_req_ids``. Calls
  with ``force_uniform_decode`` (graph capture) keep their forced answer.

A runner whose classifier already takes the batch's prefill state (V2 from 0.28.0:
``get_uniform_decode_token_count(..., has_prefill)``, PR #51865; ``decode_graph_eligible``
from 0.31.0) is ``not-needed`` and left untouched.

True decode batches (every request past its prompt) are classified exactly as before.
"""
from __future__ import annotations

import contextvars
import functools
import inspect
from typing import Any, Callable

from . import _shape
from ._shape import AlreadyFixed, ShapeMismatch
from ._static import PREFILL_PARAM_HINTS

NAME = "prefill-discriminator"

V2_RUNNER_MODULE = "vllm.v1.worker.gpu.model_runner"
V2_CG_MODULE = "vllm.v1.worker.gpu.cudagraph_utils"
V2_STATES_MODULE = "vllm.v1.worker.gpu.states"
V1_RUNNER_MODULE = "vllm.v1.worker.gpu_model_runner"
V1_BATCH_MODULE = "vllm.v1.worker.gpu_input_batch"

V2_CLASSIFIER_PARAMS = ["num_reqs", "num_tokens", "max_query_len"]
V1_CLASSIFIER_PARAMS = ["max_num_scheduled_tokens", "uniform_decode_query_len", "num_tokens",
                        "num_reqs", "force_uniform_decode"]

# (runner, scheduler_output) of the V2 execute_model call in progress, in this thread.
_V2_BATCH: contextvars.ContextVar[tuple[Any, Any] | None] = contextvars.ContextVar(
    "residue_lab_v2_batch", default=None)
# The V1 runner whose _determine_batch_execution_and_padding is in progress.
_V1_RUNNER: contextvars.ContextVar[Any | None] = contextvars.ContextVar(
    "residue_lab_v1_runner", default=None)

PATCH_MARK = "__residue_lab_patch__"


# ---------------------------------------------------------------- request-state readers
def v2_batch_has_prefill(runner: Any, scheduler_output: Any) -> bool:
    """Whether any scheduled request of a V2 runner still has prompt tokens to compute."""
    states = runner.req_states
    index = states.req_id_to_index
    computed = states.num_computed_prefill_tokens
    prefill_len = states.prefill_len.np
    for req_id in scheduler_output.num_scheduled_tokens:
        idx = index.get(req_id)
        if idx is not None and computed[idx] < prefill_len[idx]:
            return True
    return False


# runner.__dict__ key: {req_id: prefill length} of requests resumed after preemption.
RESUMED_PREFILL_LEN = "_residue_lab_resumed_prefill_len"


def v1_note_resumed(runner: Any, scheduler_output: Any) -> None:
    """Record what each resumed request must recompute (prompt + its output tokens), and
    forget finished requests: V1's input batch only keeps the prompt length."""
    table = runner.__dict__.setdefault(RESUMED_PREFILL_LEN, {})
    for req_id in scheduler_output.finished_req_ids or ():
        table.pop(req_id, None)
    data = scheduler_output.scheduled_cached_reqs
    resumed = data.resumed_req_ids
    if not resumed:
        return
    for req_id, num_output in zip(data.req_ids, data.num_output_tokens):
        state = runner.requests.get(req_id) if req_id in resumed else None
        if state is not None:
            table[req_id] = int(state.num_prompt_tokens) + int(num_output)


def v1_batch_has_prefill(runner: Any, num_reqs: int) -> bool:
    """Whether any request in a V1 runner's persistent batch is short of its prefill
    length (the prompt; prompt + output tokens for a request resumed after preemption)."""
    batch = runner.input_batch
    n = min(int(num_reqs), int(batch.num_reqs))
    computed = batch.num_computed_tokens_cpu[:n]
    target = batch.num_prompt_tokens[:n].copy()
    resumed = runner.__dict__.get(RESUMED_PREFILL_LEN)
    if resumed:
        for i, req_id in enumerate(batch.req_ids[:n]):
            if req_id in resumed:
                target[i] = max(int(target[i]), resumed[req_id])
    return bool((computed < target).any())


# ---------------------------------------------------------------- V2 runner
def _v2_classifier(runner_mod, cg_mod) -> Callable:
    """The V2 runner's batch classifier, checked to be the unfixed one this patch wraps."""
    classifier = getattr(runner_mod, "get_uniform_token_count", None)
    newer = getattr(runner_mod, "get_uniform_decode_token_count", None)
    if classifier is None and newer is not None:
        params = _shape.param_names(newer)
        if any(h in p for p in params for h in PREFILL_PARAM_HINTS):
            raise AlreadyFixed(f"get_uniform_decode_token_count takes the batch's prefill "
                               f"state ({params})")
        raise ShapeMismatch(f"get_uniform_decode_token_count parameters {params}")
    if classifier is None:
        raise ShapeMismatch(f"{V2_RUNNER_MODULE} has no get_uniform_token_count")
    if getattr(classifier, PATCH_MARK, None):
        raise ShapeMismatch("get_uniform_token_count is already wrapped by this plugin")
    params = _shape.param_names(classifier)
    if any("prefill" in p or "computed" in p for p in params):
        raise AlreadyFixed(f"get_uniform_token_count takes request state ({params})")
    _shape.require_params(classifier, V2_CLASSIFIER_PARAMS, "get_uniform_token_count")
    if classifier is not getattr(cg_mod, "get_uniform_token_count", None):
        raise ShapeMismatch("model_runner.get_uniform_token_count is not "
                            "cudagraph_utils.get_uniform_token_count")
    node = _shape.function_ast(classifier)
    if node is not None and (_shape.mentions(node, "prefill")
                             or _shape.mentions(node, "computed")):
        raise AlreadyFixed("get_uniform_token_count already reads prefill state")
    return classifier


def _v2_execute(runner_mod) -> tuple[type, Callable, str]:
    """``GPUModelRunner`` and its ``execute_model``, checked to update request states and
    then classify the batch once (by its AST, else its bytecode: the ``how``)."""
    runner_cls = getattr(runner_mod, "GPUModelRunner", None)
    if runner_cls is None:
        raise ShapeMismatch(f"{V2_RUNNER_MODULE} has no GPUModelRunner")
    execute = runner_cls.__dict__.get("execute_model")
    if execute is None or getattr(execute, PATCH_MARK, None):
        raise ShapeMismatch("GPUModelRunner.execute_model missing or already wrapped")
    exec_params = _shape.param_names(execute)
    if exec_params[:2] != ["self", "scheduler_output"] or "dummy_run" not in exec_params:
        raise ShapeMismatch(f"execute_model parameters {exec_params}")
    how = "ast"
    exec_node = _shape.function_ast(execute)
    if exec_node is not None:
        calls = _shape.calls_in(exec_node, "get_uniform_token_count")
        if len(calls) != 1 or len(calls[0].args) != 3:
            raise ShapeMismatch("execute_model does not call get_uniform_token_count(3 args) "
                                "exactly once")
        if any(_shape.mentions(a, "prefill") for a in calls[0].args):
            raise AlreadyFixed("execute_model passes prefill state to the classifier")
        updates = _shape.calls_in(exec_node, "update_requests")
        if not updates or updates[0].lineno > calls[0].lineno:
            raise ShapeMismatch("execute_model no longer updates request states before "
                                "classifying the batch")
    else:
        how = "bytecode"
        used = _shape.names_used(execute)
        if not {"get_uniform_token_count", "update_requests"} <= used:
            raise ShapeMismatch("execute_model bytecode lacks get_uniform_token_count / "
                                "update_requests")
    return runner_cls, execute, how


def _check_v2() -> dict[str, Any]:
    import importlib

    runner_mod = importlib.import_module(V2_RUNNER_MODULE)
    cg_mod = importlib.import_module(V2_CG_MODULE)
    states_mod = importlib.import_module(V2_STATES_MODULE)
    classifier = _v2_classifier(runner_mod, cg_mod)
    runner_cls, execute, how = _v2_execute(runner_mod)
    state_attrs = _shape.self_attrs_assigned(states_mod.RequestState.__init__)
    if state_attrs is not None:
        missing = {"req_id_to_index", "num_computed_prefill_tokens", "prefill_len"} - state_attrs
        if missing:
            raise ShapeMismatch(f"RequestState lacks {sorted(missing)}")
    update_node = _shape.function_ast(runner_cls.update_requests)
    if update_node is not None and not _shape.mentions(update_node,
                                                       "num_computed_prefill_tokens"):
        raise ShapeMismatch("update_requests no longer refreshes num_computed_prefill_tokens")
    return {"module": runner_mod, "runner_cls": runner_cls, "classifier": classifier,
            "execute": execute, "checked_by": how}


def _apply_v2(found: dict[str, Any]) -> Callable[[], None]:
    runner_mod = found["module"]
    runner_cls = found["runner_cls"]
    original_classifier = found["classifier"]
    original_execute = found["execute"]
    exec_sig = inspect.signature(original_execute)

    @functools.wraps(original_execute)
    def execute_model(self: Any, scheduler_output: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            bound = exec_sig.bind(self, scheduler_output, *args, **kwargs)
            dummy = bool(bound.arguments.get("dummy_run", False))
        except TypeError:
            dummy = True  # let the original raise its own error
        token = _V2_BATCH.set(None if dummy else (self, scheduler_output))
        try:
            return original_execute(self, scheduler_output, *args, **kwargs)
        finally:
            _V2_BATCH.reset(token)

    @functools.wraps(original_classifier)
    def get_uniform_token_count(num_reqs: int, num_tokens: int,
                                max_query_len: int) -> int | None:
        count = original_classifier(num_reqs, num_tokens, max_query_len)
        if count is None:
            return None
        batch = _V2_BATCH.get()
        if batch is not None and v2_batch_has_prefill(*batch):
            return None  # a prompt tail shaped like a verify step: not uniform decode
        return count

    setattr(execute_model, PATCH_MARK, NAME)
    setattr(get_uniform_token_count, PATCH_MARK, NAME)
    runner_cls.execute_model = execute_model
    runner_mod.get_uniform_token_count = get_uniform_token_count

    def undo() -> None:
        runner_cls.execute_model = original_execute
        runner_mod.get_uniform_token_count = original_classifier

    return undo


# ---------------------------------------------------------------- V1 runner
def _check_v1() -> dict[str, Any]:
    import importlib

    batch_mod = importlib.import_module(V1_BATCH_MODULE)
    runner_mod, runner_cls, raw = _shape.own_member(
        V1_RUNNER_MODULE, "GPUModelRunner", "_is_uniform_decode", staticmethod, PATCH_MARK)
    params = _shape.param_names(raw)
    if any("prefill" in p or "computed" in p for p in params):
        raise AlreadyFixed(f"_is_uniform_decode takes request state ({params})")
    _shape.require_params(raw, V1_CLASSIFIER_PARAMS, "_is_uniform_decode")
    how = "ast"
    node = _shape.function_ast(raw)
    if node is not None:
        if _shape.mentions(node, "prefill") or _shape.mentions(node, "computed"):
            raise AlreadyFixed("_is_uniform_decode already reads prefill state")
    else:
        how = "bytecode"
    determine = runner_cls.__dict__.get("_determine_batch_execution_and_padding")
    if determine is None or getattr(determine, PATCH_MARK, None):
        raise ShapeMismatch("_determine_batch_execution_and_padding missing or wrapped")
    if "force_uniform_decode" not in _shape.param_names(determine):
        raise ShapeMismatch("_determine_batch_execution_and_padding has no "
                            "force_uniform_decode")
    det_node = _shape.function_ast(determine)
    if det_node is not None:
        calls = _shape.calls_in(det_node, "_is_uniform_decode")
        if len(calls) != 1:
            raise ShapeMismatch("_determine_batch_execution_and_padding does not call "
                                "_is_uniform_decode exactly once")
        kw = {k.arg for k in calls[0].keywords}
        if not {"num_reqs", "force_uniform_decode"} <= kw:
            raise ShapeMismatch(f"_is_uniform_decode called with keywords {sorted(kw)}")
    elif "_is_uniform_decode" not in _shape.names_used(determine):
        raise ShapeMismatch("_determine_batch_execution_and_padding bytecode does not "
                            "reference _is_uniform_decode")
    attrs = _shape.self_attrs_assigned(batch_mod.InputBatch.__init__)
    if attrs is not None:
        missing = {"num_prompt_tokens", "num_computed_tokens_cpu"} - attrs
        if missing:
            raise ShapeMismatch(f"InputBatch lacks {sorted(missing)}")
    for prop in ("num_reqs", "req_ids"):
        if not isinstance(getattr(batch_mod.InputBatch, prop, None), property):
            raise ShapeMismatch(f"InputBatch.{prop} is not a property")
    update = runner_cls.__dict__.get("_update_states")
    if update is None or getattr(update, PATCH_MARK, None):
        raise ShapeMismatch("GPUModelRunner._update_states missing or already wrapped")
    if _shape.param_names(update) != ["self", "scheduler_output"]:
        raise ShapeMismatch(f"_update_states parameters {_shape.param_names(update)}")
    upd_node = _shape.function_ast(update)
    if upd_node is not None and not (_shape.mentions(upd_node, "resumed_req_ids")
                                     and _shape.mentions(upd_node, "num_output_tokens")):
        raise ShapeMismatch("_update_states no longer reads resumed_req_ids / "
                            "num_output_tokens")
    return {"runner_cls": runner_cls, "classifier": raw, "determine": determine,
            "update": update, "checked_by": how}


def _apply_v1(found: dict[str, Any]) -> Callable[[], None]:
    runner_cls = found["runner_cls"]
    original_raw = found["classifier"]
    original_fn = original_raw.__func__
    original_determine = found["determine"]
    original_update = found["update"]

    @functools.wraps(original_update)
    def _update_states(self: Any, scheduler_output: Any) -> Any:
        result = original_update(self, scheduler_output)
        v1_note_resumed(self, scheduler_output)
        return result

    @functools.wraps(original_determine)
    def _determine_batch_execution_and_padding(self: Any, *args: Any, **kwargs: Any) -> Any:
        token = _V1_RUNNER.set(self)
        try:
            return original_determine(self, *args, **kwargs)
        finally:
            _V1_RUNNER.reset(token)

    @functools.wraps(original_fn)
    def _is_uniform_decode(max_num_scheduled_tokens: int, uniform_decode_query_len: int,
                           num_tokens: int, num_reqs: int,
                           force_uniform_decode: bool | None = None) -> bool:
        uniform = original_fn(max_num_scheduled_tokens, uniform_decode_query_len,
                              num_tokens, num_reqs, force_uniform_decode)
        if not uniform or force_uniform_decode is not None:
            return uniform
        runner = _V1_RUNNER.get()
        if runner is not None and v1_batch_has_prefill(runner, num_reqs):
            return False  # a prompt tail shaped like a verify step: not uniform decode
        return uniform

    setattr(_is_uniform_decode, PATCH_MARK, NAME)
    setattr(_determine_batch_execution_and_padding, PATCH_MARK, NAME)
    setattr(_update_states, PATCH_MARK, NAME)
    runner_cls._is_uniform_decode = staticmethod(_is_uniform_decode)
    runner_cls._determine_batch_execution_and_padding = _determine_batch_execution_and_padding
    runner_cls._update_states = _update_states

    def undo() -> None:
        runner_cls._is_uniform_decode = original_raw
        runner_cls._determine_batch_execution_and_padding = original_determine
        runner_cls._update_states = original_update

    return undo


TARGETS: dict[str, tuple[Callable[[], dict[str, Any]],
                         Callable[[dict[str, Any]], Callable[[], None]]]] = {
    "v2-runner": (_check_v2, _apply_v2),
    "v1-runner": (_check_v1, _apply_v1),
}
