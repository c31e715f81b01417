"""SGLang's server parser for the tests: its own where SGLang imports here, else one built
from sglang 0.5.12's argument list as extracted from its source
(``tests/fixtures/sglang_0.5.12_server_args.json``, ``extract_server_args.py``).

SGLang's import chain (``sglang.srt.server_args`` -> ``sglang.srt.utils.common`` ->
``torchvision.io``) needs a torchvision built for CUDA torch: on a CPU box with no CPU
torchvision wheel it cannot be imported, so the list stands in for the parser there
(docs/sglang.md says how a CPU box gets an environment where it imports)."""
from __future__ import annotations

import argparse
import importlib.util
import json
from pathlib import Path

ARGS_FILE = Path(__file__).resolve().parents[1] / "fixtures" / "sglang_0.5.12_server_args.json"
# SGLang's human_readable_int also takes "128k"; the harness writes plain integers
TYPES = {"int": int, "float": float, "human_readable_int": int}


def sglang_installed() -> bool:
    """A real SGLang on the path: a file origin, not a folder named sglang."""
    spec = importlib.util.find_spec("sglang")
    return spec is not None and spec.origin not in (None, "namespace")


def real_parser_importable() -> bool:
    """A real SGLang whose server arguments import."""
    if not sglang_installed():
        return False
    try:
        from sglang.srt.server_args import ServerArgs  # noqa: F401
    except Exception:
        return False
    return True


def listed_parser(parser_cls=argparse.ArgumentParser) -> argparse.ArgumentParser:
    """A parser with every argument of sglang 0.5.12's ``ServerArgs.add_cli_args``: the
    same option strings, dests, switches (``--x`` / ``--no-x`` pairs too), nargs, literal
    choices and required flags (types other than the integer and float ones read as
    strings; SGLang's own action classes as switches)."""
    parser = parser_cls(prog="sglang serve")
    for arg in json.loads(ARGS_FILE.read_text()):
        kw: dict = {"dest": arg["dest"]}
        action = arg.get("action")
        if action == "store_true" or (action and action.endswith("StoreTrueAction")) \
                or action == "DeprecatedAction":
            kw["action"] = "store_true"
        elif action == "BooleanOptionalAction":   # --x and --no-x
            kw["action"] = argparse.BooleanOptionalAction
        else:
            kw["type"] = TYPES.get(arg.get("type"), str)
            for key in ("nargs", "choices", "required"):
                if key in arg:
                    kw[key] = arg[key]
        parser.add_argument(*arg["names"], **kw)
    return parser


def listed_or_real(parser_cls=argparse.ArgumentParser):
    """(parser, words) as ``harness.serve.sglang_adapter.sglang_parser`` answers: SGLang's
    own where it imports, else the listed one."""
    if real_parser_importable():
        from harness.serve.sglang_adapter import sglang_parser
        return sglang_parser(parser_cls)
    return listed_parser(parser_cls), "sglang 0.5.12's argument list (from its source)"
