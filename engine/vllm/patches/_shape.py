"""Shape checks: does the code we are about to wrap look like what the patch was written for?

A version string says nothing about a backport or a local fork, so every patch reads the
code itself: signature, AST of the source where the source ships, code-object names and
constants where it does not. A check returns ``None`` when the shape matches, or the reason
it does not.
"""
from __future__ import annotations

import ast
import inspect
import textwrap
import types
from typing import Any, Callable, Iterable


class ShapeMismatch(Exception):
    """The target's code is not the code the patch was written against."""


class AlreadyFixed(Exception):
    """The target already carries the fix upstream: nothing to patch."""


def own_member(module_name: str, class_name: str, attr: str, kind: type,
               mark: str) -> tuple[types.ModuleType, type, Any]:
    """``module.class_name.__dict__[attr]``, which must be a ``kind`` (staticmethod,
    classmethod) defined on that class itself and not already wrapped by this plugin."""
    import importlib

    mod = importlib.import_module(module_name)
    cls = getattr(mod, class_name, None)
    if cls is None:
        raise ShapeMismatch(f"{module_name} has no {class_name}")
    raw = cls.__dict__.get(attr)
    if not isinstance(raw, kind):
        raise ShapeMismatch(f"{class_name}.{attr} is not a {kind.__name__} defined on "
                            f"{class_name}")
    if getattr(raw.__func__, mark, None):
        raise ShapeMismatch(f"{attr} is already wrapped by this plugin")
    return mod, cls, raw


def unwrap(func: Any) -> Any:
    if isinstance(func, (staticmethod, classmethod)):
        func = func.__func__
    return inspect.unwrap(func)


def function_ast(func: Any) -> ast.FunctionDef | None:
    """The function's own AST node, or ``None`` where no source is available."""
    try:
        src = inspect.getsource(unwrap(func))
    except (OSError, TypeError):
        return None
    tree = ast.parse(textwrap.dedent(src))
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            return node  # the first def is the function itself
    return None


def param_names(func: Any) -> list[str]:
    return list(inspect.signature(unwrap(func)).parameters)


def require_params(func: Any, expected: Iterable[str], what: str) -> None:
    got = param_names(func)
    if got != list(expected):
        raise ShapeMismatch(f"{what}: parameters {got}, expected {list(expected)}")


def code_of(func: Any) -> types.CodeType:
    return unwrap(func).__code__


def names_used(func: Any) -> set[str]:
    """Global and attribute names the function's bytecode refers to (no source needed)."""
    code = code_of(func)
    out = set(code.co_names) | set(code.co_varnames)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            out |= set(const.co_names) | set(const.co_varnames)
    return out


def string_constants(func: Any) -> set[str]:
    code = code_of(func)
    out: set[str] = set()
    stack = [code]
    while stack:
        c = stack.pop()
        for const in c.co_consts:
            if isinstance(const, str):
                out.add(const)
            elif isinstance(const, types.CodeType):
                stack.append(const)
    return out


def calls_in(node: ast.AST, name: str) -> list[ast.Call]:
    """Calls to ``name(...)`` or ``<anything>.name(...)`` inside ``node``, in source order."""
    found = []
    for sub in ast.walk(node):
        if isinstance(sub, ast.Call):
            f = sub.func
            if (isinstance(f, ast.Name) and f.id == name) or \
                    (isinstance(f, ast.Attribute) and f.attr == name):
                found.append(sub)
    return sorted(found, key=lambda c: (c.lineno, c.col_offset))


def self_attrs_assigned(func: Any) -> set[str] | None:
    """``self.X`` names assigned in a method (``None`` without source)."""
    node = function_ast(func)
    if node is None:
        return None
    out = set()
    for sub in ast.walk(node):
        targets: list[ast.AST] = []
        if isinstance(sub, ast.Assign):
            targets = list(sub.targets)
        elif isinstance(sub, (ast.AnnAssign, ast.AugAssign)):
            targets = [sub.target]
        for t in targets:
            if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) \
                    and t.value.id == "self":
                out.add(t.attr)
    return out


def mentions(node: ast.AST, needle: str) -> bool:
    """Any name, attribute or argument in ``node`` containing ``needle``."""
    for sub in ast.walk(node):
        ident = None
        if isinstance(sub, ast.Name):
            ident = sub.id
        elif isinstance(sub, ast.Attribute):
            ident = sub.attr
        elif isinstance(sub, ast.arg):
            ident = sub.arg
        elif isinstance(sub, ast.keyword):
            ident = sub.arg
        if ident and needle in ident.lower():
            return True
    return False


def describe(func: Callable[..., Any]) -> str:
    f = unwrap(func)
    return f"{f.__module__}.{f.__qualname__}"
