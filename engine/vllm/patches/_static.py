"""The patches' gates, run on vLLM *source* without importing it.

For a vLLM that cannot be imported here (another torch pin, another release), this runs
the AST half of each gate on the files themselves and answers with the plugin's own
words: ``applied`` (the plugin would apply it: the shape matches), ``not-needed: why``
(that runner already has a prefill check / the assert is gone) or ``refused: why`` (the
shape changed). Gates decide by the code, never by the version string. The import-time
check in the plugin remains the authority on the machine that runs vLLM.
"""
from __future__ import annotations

import ast
from pathlib import Path

from ._sources import SourceTree, open_source
from .sliding_window_guard import _is_alignment_assert

#: Parameter names by which a uniform-decode classifier takes request state:
#: ``has_prefill`` (V2, PR #51865, 0.28.0), ``decode_graph_eligible`` (V2, 0.31.0 on).
PREFILL_PARAM_HINTS = ("prefill", "computed", "eligible")
V1_PARAMS = ["max_num_scheduled_tokens", "uniform_decode_query_len", "num_tokens",
             "num_reqs", "force_uniform_decode"]
V2_OLD_PARAMS = ["num_reqs", "num_tokens", "max_query_len"]

V1_RUNNER = "vllm/v1/worker/gpu_model_runner.py"
V1_BATCH = "vllm/v1/worker/gpu_input_batch.py"
V2_RUNNER = "vllm/v1/worker/gpu/model_runner.py"
V2_CG = "vllm/v1/worker/gpu/cudagraph_utils.py"
V2_STATES = "vllm/v1/worker/gpu/states.py"
WORKER_UTILS = "vllm/v1/worker/utils.py"
SW_MANAGER = "vllm/v1/core/single_type_kv_cache_manager.py"


class Refused(Exception):
    """The code is not the shape the patch was written for."""


class NotNeeded(Exception):
    """The release already carries the fix on this target."""


def _load(tree: SourceTree, rel: str) -> ast.Module:
    text = tree.read(rel)
    if text is None:
        raise Refused(f"{rel} is not in this release")
    return ast.parse(text)


def _find(module: ast.AST, cls: str | None, fn: str) -> ast.FunctionDef | None:
    scope: ast.AST = module
    if cls is not None:
        found = [n for n in ast.walk(module) if isinstance(n, ast.ClassDef) and n.name == cls]
        if not found:
            return None
        scope = found[0]
    for node in getattr(scope, "body", []):
        if isinstance(node, ast.FunctionDef) and node.name == fn:
            return node
    return None


def _params(fn: ast.FunctionDef) -> list[str]:
    a = fn.args
    return [x.arg for x in a.posonlyargs + a.args + a.kwonlyargs]


def _takes_prefill_state(params: list[str]) -> bool:
    return any(h in p for p in params for h in PREFILL_PARAM_HINTS)


def _decorators(fn: ast.FunctionDef) -> set[str]:
    return {d.id for d in fn.decorator_list if isinstance(d, ast.Name)}


def _calls(node: ast.AST, name: str) -> list[ast.Call]:
    out = []
    for sub in ast.walk(node):
        if isinstance(sub, ast.Call):
            f = sub.func
            if (isinstance(f, ast.Name) and f.id == name) or \
                    (isinstance(f, ast.Attribute) and f.attr == name):
                out.append(sub)
    return sorted(out, key=lambda c: c.lineno)


def _self_assigned(fn: ast.FunctionDef) -> set[str]:
    out = set()
    for sub in ast.walk(fn):
        targets = sub.targets if isinstance(sub, ast.Assign) else \
            [sub.target] if isinstance(sub, (ast.AnnAssign, ast.AugAssign)) else []
        for t in targets:
            if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) \
                    and t.value.id == "self":
                out.add(t.attr)
    return out


def _names(node: ast.AST) -> set[str]:
    return {n.id if isinstance(n, ast.Name) else n.attr for n in ast.walk(node)
            if isinstance(n, (ast.Name, ast.Attribute))}


# ---------------------------------------------------------------- V2 runner
def gate_v2(tree: SourceTree) -> str:
    mr = _load(tree, V2_RUNNER)
    used = _names(mr)
    if "get_uniform_decode_token_count" in used:
        utils = _load(tree, WORKER_UTILS)
        fn = _find(utils, None, "get_uniform_decode_token_count")
        if fn is None:
            raise Refused(f"{V2_RUNNER} uses get_uniform_decode_token_count, "
                          f"{WORKER_UTILS} does not define it")
        params = _params(fn)
        if _takes_prefill_state(params):
            raise NotNeeded(f"{WORKER_UTILS}: get_uniform_decode_token_count({', '.join(params)})"
                            " takes the batch's prefill state")
        raise Refused(f"get_uniform_decode_token_count({', '.join(params)}) takes no prefill "
                      "state and is not the classifier the patch wraps")
    cg = _load(tree, V2_CG)
    fn = _find(cg, None, "get_uniform_token_count")
    if fn is None:
        raise Refused("no V2 uniform-decode classifier found")
    params = _params(fn)
    if _takes_prefill_state(params):
        raise NotNeeded(f"{V2_CG}: get_uniform_token_count({', '.join(params)})")
    if params != V2_OLD_PARAMS:
        raise Refused(f"get_uniform_token_count parameters {params}")
    ex = _find(mr, "GPUModelRunner", "execute_model")
    if ex is None:
        raise Refused("V2 GPUModelRunner.execute_model not found")
    calls = _calls(ex, "get_uniform_token_count")
    ups = _calls(ex, "update_requests")
    if len(calls) != 1 or len(calls[0].args) != 3:
        raise Refused("execute_model's classifier call changed")
    if not ups or ups[0].lineno > calls[0].lineno:
        raise Refused("update_requests no longer precedes the classifier")
    init = _find(_load(tree, V2_STATES), "RequestState", "__init__")
    if init is None:
        raise Refused("RequestState.__init__ not found")
    missing = {"req_id_to_index", "num_computed_prefill_tokens", "prefill_len"} \
        - _self_assigned(init)
    if missing:
        raise Refused(f"RequestState lacks {sorted(missing)}")
    return "applied"


# ---------------------------------------------------------------- V1 runner
def gate_v1(tree: SourceTree) -> str:
    gm = _load(tree, V1_RUNNER)
    fn = _find(gm, "GPUModelRunner", "_is_uniform_decode")
    det = _find(gm, "GPUModelRunner", "_determine_batch_execution_and_padding")
    upd = _find(gm, "GPUModelRunner", "_update_states")
    init = _find(_load(tree, V1_BATCH), "InputBatch", "__init__")
    if fn is None or det is None or upd is None or init is None:
        raise Refused("_is_uniform_decode / _determine_batch_... / _update_states / "
                      "InputBatch not found")
    if "staticmethod" not in _decorators(fn):
        raise Refused("_is_uniform_decode is not a staticmethod")
    p = _params(fn)
    if _takes_prefill_state(p):
        raise NotNeeded(f"{V1_RUNNER}: _is_uniform_decode({', '.join(p)})")
    if p != V1_PARAMS:
        raise Refused(f"_is_uniform_decode parameters {p}")
    if _names(fn) & {"num_computed_tokens_cpu", "num_prompt_tokens", "has_prefill"}:
        raise NotNeeded("_is_uniform_decode already reads request state")
    if len(_calls(det, "_is_uniform_decode")) != 1:
        raise Refused("classifier call in _determine_batch_... changed")
    if _params(upd)[:2] != ["self", "scheduler_output"] or \
            not {"resumed_req_ids", "num_output_tokens"} <= _names(upd):
        raise Refused("_update_states no longer reads resumed_req_ids / num_output_tokens")
    missing = {"num_prompt_tokens", "num_computed_tokens_cpu", "req_ids"} - \
        (_self_assigned(init) | _property_names(tree))
    if missing:
        raise Refused(f"InputBatch lacks {sorted(missing)}")
    return "applied"


def _property_names(tree: SourceTree) -> set[str]:
    ib = _load(tree, V1_BATCH)
    cls = [n for n in ast.walk(ib) if isinstance(n, ast.ClassDef) and n.name == "InputBatch"]
    if not cls:
        return set()
    return {f.name for f in cls[0].body if isinstance(f, ast.FunctionDef)
            and "property" in _decorators(f)}


# ---------------------------------------------------------------- sliding window
def gate_sliding_window(tree: SourceTree) -> str:
    sk = _load(tree, SW_MANAGER)
    fn = _find(sk, "SlidingWindowManager", "find_longest_cache_hit")
    if fn is None:
        raise Refused("SlidingWindowManager.find_longest_cache_hit not found")
    if not any(_is_alignment_assert(n) for n in ast.walk(fn)):
        raise NotNeeded("no `assert alignment_tokens % kv_cache_spec.block_size == 0` in "
                        "SlidingWindowManager.find_longest_cache_hit")
    if "classmethod" not in _decorators(fn):
        raise Refused("find_longest_cache_hit is not a classmethod")
    if not {"alignment_tokens", "kv_cache_spec", "kv_cache_group_ids"} <= set(_params(fn)):
        raise Refused(f"parameters {_params(fn)}")
    return "applied"


GATES = {
    "prefill-discriminator/v1-runner": gate_v1,
    "prefill-discriminator/v2-runner": gate_v2,
    "sliding-window-guard/sliding-window-manager": gate_sliding_window,
}


def check_source_tree(tree: SourceTree | str | Path) -> dict[str, str]:
    """``{patch/target: "applied" | "not-needed: why" | "refused: why"}`` for a source tree
    (or anything :func:`open_source` takes: a directory, a ``.whl``, ``vllm==X``)."""
    if isinstance(tree, (str, Path)):
        tree = open_source(str(tree))
    out: dict[str, str] = {}
    for name, gate in GATES.items():
        try:
            out[name] = gate(tree)
        except NotNeeded as exc:
            out[name] = f"not-needed: {exc}"
        except (Refused, SyntaxError, UnicodeDecodeError) as exc:
            out[name] = f"refused: {exc}"
    return out


__all__ = ["GATES", "PREFILL_PARAM_HINTS", "check_source_tree", "gate_v1", "gate_v2",
           "gate_sliding_window"]
