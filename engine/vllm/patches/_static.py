"""Check the patches' targets in a vLLM *source tree* without importing it.

For a vLLM that cannot be imported here (another torch pin, e.g. 0.26.0 for the H200:
``pip download vllm==0.26.0 --no-deps`` and unzip), this runs the AST half of each
patch's shape check on the files themselves. The import-time check in the plugin remains
the authority on the machine that runs vLLM; this answers "will it apply there?" early.
"""
from __future__ import annotations

import ast
from pathlib import Path

from .sliding_window_guard import _is_alignment_assert


def _load(root: Path, rel: str) -> ast.Module:
    return ast.parse((root / rel).read_text())


def _find(tree: ast.AST, cls: str | None, fn: str) -> ast.FunctionDef | None:
    scope: ast.AST = tree
    if cls is not None:
        found = [n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name == cls]
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


def _decorators(fn: ast.FunctionDef) -> set[str]:
    out = set()
    for d in fn.decorator_list:
        if isinstance(d, ast.Name):
            out.add(d.id)
    return out


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


def check_source_tree(site: str | Path) -> dict[str, str]:
    """``{target: "ok" | "not-needed: ..." | "mismatch: ..."}`` for a dir holding ``vllm/``."""
    root = Path(site)
    out: dict[str, str] = {}

    # V2 runner
    try:
        cg = _load(root, "vllm/v1/worker/gpu/cudagraph_utils.py")
        mr = _load(root, "vllm/v1/worker/gpu/model_runner.py")
        st = _load(root, "vllm/v1/worker/gpu/states.py")
        fn = _find(cg, None, "get_uniform_token_count")
        ex = _find(mr, "GPUModelRunner", "execute_model")
        init = _find(st, "RequestState", "__init__")
        if fn is None or ex is None or init is None:
            raise ValueError("classifier / execute_model / RequestState.__init__ not found")
        p = _params(fn)
        if any("prefill" in x for x in p):
            out["prefill-discriminator/v2-runner"] = f"not-needed: classifier takes {p}"
        elif p != ["num_reqs", "num_tokens", "max_query_len"]:
            raise ValueError(f"classifier parameters {p}")
        else:
            calls = _calls(ex, "get_uniform_token_count")
            ups = _calls(ex, "update_requests")
            if len(calls) != 1 or len(calls[0].args) != 3:
                raise ValueError("execute_model's classifier call changed")
            if not ups or ups[0].lineno > calls[0].lineno:
                raise ValueError("update_requests no longer precedes the classifier")
            missing = {"req_id_to_index", "num_computed_prefill_tokens", "prefill_len"} \
                - _self_assigned(init)
            if missing:
                raise ValueError(f"RequestState lacks {sorted(missing)}")
            out["prefill-discriminator/v2-runner"] = "ok"
    except (OSError, SyntaxError, ValueError) as exc:
        out["prefill-discriminator/v2-runner"] = f"mismatch: {exc}"

    # V1 runner
    try:
        gm = _load(root, "vllm/v1/worker/gpu_model_runner.py")
        ib = _load(root, "vllm/v1/worker/gpu_input_batch.py")
        fn = _find(gm, "GPUModelRunner", "_is_uniform_decode")
        det = _find(gm, "GPUModelRunner", "_determine_batch_execution_and_padding")
        init = _find(ib, "InputBatch", "__init__")
        if fn is None or det is None or init is None:
            raise ValueError("_is_uniform_decode / _determine_batch_... / InputBatch not found")
        if "staticmethod" not in _decorators(fn):
            raise ValueError("_is_uniform_decode is not a staticmethod")
        p = _params(fn)
        if any("prefill" in x or "computed" in x for x in p):
            out["prefill-discriminator/v1-runner"] = f"not-needed: classifier takes {p}"
        elif p != ["max_num_scheduled_tokens", "uniform_decode_query_len", "num_tokens",
                   "num_reqs", "force_uniform_decode"]:
            raise ValueError(f"classifier parameters {p}")
        else:
            calls = _calls(det, "_is_uniform_decode")
            if len(calls) != 1:
                raise ValueError("classifier call in _determine_batch_... changed")
            missing = {"num_prompt_tokens", "num_computed_tokens_cpu"} - _self_assigned(init)
            if missing:
                raise ValueError(f"InputBatch lacks {sorted(missing)}")
            out["prefill-discriminator/v1-runner"] = "ok"
    except (OSError, SyntaxError, ValueError) as exc:
        out["prefill-discriminator/v1-runner"] = f"mismatch: {exc}"

    # Sliding-window guard
    try:
        sk = _load(root, "vllm/v1/core/single_type_kv_cache_manager.py")
        fn = _find(sk, "SlidingWindowManager", "find_longest_cache_hit")
        if fn is None:
            raise ValueError("SlidingWindowManager.find_longest_cache_hit not found")
        if "classmethod" not in _decorators(fn):
            raise ValueError("find_longest_cache_hit is not a classmethod")
        if not {"alignment_tokens", "kv_cache_spec", "kv_cache_group_ids"} <= set(_params(fn)):
            raise ValueError(f"parameters {_params(fn)}")
        if any(_is_alignment_assert(n) for n in ast.walk(fn)):
            out["sliding-window-guard/sliding-window-manager"] = "ok"
        else:
            out["sliding-window-guard/sliding-window-manager"] = "not-needed: no alignment assert"
    except (OSError, SyntaxError, ValueError) as exc:
        out["sliding-window-guard/sliding-window-manager"] = f"mismatch: {exc}"
    return out
