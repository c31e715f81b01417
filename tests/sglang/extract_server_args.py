"""SGLang's server arguments as data, read from its source without importing it.

``python tests/sglang/extract_server_args.py .../sglang/srt/server_args.py > OUT.json``
walks ``ServerArgs.add_cli_args`` (every ``parser.add_argument(...)``) and the
``ServerArgs`` dataclass's field defaults with ``ast``: each argument's option strings,
``dest``, ``type`` / ``action`` / ``nargs`` / ``choices`` / ``required`` where they are
literals, and its default where the class field's is. Used where SGLang itself cannot be
imported (its import chain needs a CUDA build of torchvision): the committed
``tests/fixtures/sglang_0.5.12_server_args.json`` is this script's output for sglang 0.5.12.
"""
from __future__ import annotations

import ast
import json
import sys

KEPT = ("type", "action", "nargs", "choices", "required", "dest", "const")


def _literal(node: ast.AST, key: str):
    if isinstance(node, ast.Name) and key in ("type", "action"):   # int, an action class...
        return node.id
    if isinstance(node, ast.Attribute) and key in ("type", "action"):   # argparse.X
        return node.attr
    try:
        return ast.literal_eval(node)
    except ValueError:
        return None


def _defaults(cls: ast.ClassDef) -> dict:
    out = {}
    for st in cls.body:
        if isinstance(st, ast.AnnAssign) and isinstance(st.target, ast.Name) and st.value:
            try:
                out[st.target.id] = ast.literal_eval(st.value)
            except ValueError:
                pass
    return out


def extract(source: str) -> list[dict]:
    cls = next(n for n in ast.walk(ast.parse(source))
               if isinstance(n, ast.ClassDef) and n.name == "ServerArgs")
    defaults = _defaults(cls)
    fn = next(n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "add_cli_args")
    out = []
    for call in ast.walk(fn):
        if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute)
                and call.func.attr == "add_argument"):
            continue
        names = [a.value for a in call.args if isinstance(a, ast.Constant)]
        arg = {"names": names}
        for kw in call.keywords:
            if kw.arg in KEPT:
                value = _literal(kw.value, kw.arg)
                if value is not None:
                    arg[kw.arg] = value
        dest = arg.get("dest") or names[0].lstrip("-").replace("-", "_")
        arg["dest"] = dest
        if dest in defaults:
            arg["default"] = defaults[dest]
        out.append(arg)
    return out


if __name__ == "__main__":
    with open(sys.argv[1], encoding="utf-8") as f:
        json.dump(extract(f.read()), sys.stdout, indent=0)
