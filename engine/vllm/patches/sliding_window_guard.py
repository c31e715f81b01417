"""#18 fix: a sliding-window group whose block is larger than the cache-hit alignment is a
clean cache miss, not a dead engine.

vLLM 0.27.1's ``SlidingWindowManager.find_longest_cache_hit``
(``vllm/v1/core/single_type_kv_cache_manager.py``) opens with
``assert alignment_tokens % kv_cache_spec.block_size == 0``. On a hybrid model the page
arithmetic can promote the sliding-window block *larger* than the hash unit (2048 vs a
128-token ``--prefix-match-unit`` at k=3 in the thread), the assert fires on the first
request that looks up the cache, and the engine core dies. The wrapper answers that lookup
with "no cached blocks, hit length 0" for every group id, which the coordinator's
fixed-point loop turns into a miss for the request: correct, merely uncached.

Newer vLLM replaced the assert with a warning and a fallback; when the assert is not in
the code, the patch reports ``not-needed`` and touches nothing.
"""
from __future__ import annotations

import ast
import functools
import inspect
import logging
from typing import Any, Callable

from . import _shape
from ._shape import AlreadyFixed, ShapeMismatch

NAME = "sliding-window-guard"
MODULE = "vllm.v1.core.single_type_kv_cache_manager"
ASSERT_MESSAGE = "SlidingWindowManager does not support fine-grained (partial) cache hits"
REQUIRED_PARAMS = ("block_hashes", "max_length", "kv_cache_group_ids", "block_pool",
                   "kv_cache_spec", "drop_eagle_block", "alignment_tokens")
PATCH_MARK = "__residue_lab_patch__"

logger = logging.getLogger("vllm.residue_lab.patches")


def _is_alignment_assert(node: ast.AST) -> bool:
    """``assert alignment_tokens % kv_cache_spec.block_size == 0`` (any message)."""
    if not isinstance(node, ast.Assert):
        return False
    test = node.test
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1
            and isinstance(test.ops[0], ast.Eq)):
        return False
    left, right = test.left, test.comparators[0]
    if not (isinstance(right, ast.Constant) and right.value == 0):
        return False
    if not (isinstance(left, ast.BinOp) and isinstance(left.op, ast.Mod)):
        return False
    num, den = left.left, left.right
    return (isinstance(num, ast.Name) and num.id == "alignment_tokens"
            and isinstance(den, ast.Attribute) and den.attr == "block_size"
            and isinstance(den.value, ast.Name) and den.value.id == "kv_cache_spec")


def _check() -> dict[str, Any]:
    mod, cls, raw = _shape.own_member(MODULE, "SlidingWindowManager", "find_longest_cache_hit",
                                      classmethod, PATCH_MARK)
    params = _shape.param_names(raw)
    missing = [p for p in REQUIRED_PARAMS if p not in params]
    if params[:1] != ["cls"] or missing:
        raise ShapeMismatch(f"find_longest_cache_hit parameters {params} (missing {missing})")
    node = _shape.function_ast(raw)
    if node is not None:
        how = "ast"
        if not any(_is_alignment_assert(sub) for sub in ast.walk(node)):
            raise AlreadyFixed("no `assert alignment_tokens % kv_cache_spec.block_size == 0` "
                               "in find_longest_cache_hit (upstream handles it)")
    else:
        how = "bytecode"
        if ASSERT_MESSAGE not in _shape.string_constants(raw):
            raise AlreadyFixed("the alignment assert's message is not in "
                               "find_longest_cache_hit's constants")
    return {"cls": cls, "raw": raw, "checked_by": how}


def _apply(found: dict[str, Any]) -> Callable[[], None]:
    cls = found["cls"]
    raw = found["raw"]
    original = raw.__func__
    sig = inspect.signature(original)
    warned: set[tuple[int, int]] = set()

    @functools.wraps(original)
    def find_longest_cache_hit(klass: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            bound = sig.bind(klass, *args, **kwargs)
        except TypeError:
            return original(klass, *args, **kwargs)
        a = bound.arguments
        spec = a["kv_cache_spec"]
        block_size = getattr(spec, "block_size", None)
        alignment = a["alignment_tokens"]
        if block_size and alignment % block_size != 0:
            key = (int(block_size), int(alignment))
            if key not in warned:
                warned.add(key)
                logger.warning(
                    "residue-lab %s: sliding-window block %d is not a divisor of the "
                    "cache-hit alignment %d; answering a cache miss for this group "
                    "instead of asserting (#18)", NAME, block_size, alignment)
            return tuple([] for _ in a["kv_cache_group_ids"]), 0
        return original(klass, *args, **kwargs)

    setattr(find_longest_cache_hit, PATCH_MARK, NAME)
    cls.find_longest_cache_hit = classmethod(find_longest_cache_hit)

    def undo() -> None:
        cls.find_longest_cache_hit = raw

    return undo


TARGETS: dict[str, tuple[Callable[[], dict[str, Any]],
                         Callable[[dict[str, Any]], Callable[[], None]]]] = {
    "sliding-window-manager": (_check, _apply),
}
