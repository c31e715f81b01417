"""``python -m engine.vllm.patches [--status] [--json] [--select all|none|a,b]``
``python -m engine.vllm.patches --check-source PATH_OR_WHEEL [--json]``

``--status`` (the default) applies the selected patches to the installed vLLM in this
process (nothing is written to disk) and prints what each one did: the same check the
plugin runs in every vLLM process. Exit 0 when no selected patch was refused, 1 otherwise.

``--check-source`` runs the gates on vLLM's source without importing it: a directory
holding ``vllm/`` (site-packages, an unpacked wheel), a ``.whl`` file (read member by
member, never unpacked), or ``vllm==X`` (the release's wheel read remotely from PyPI by
HTTP ranges, cached under ~/.cache/residue-lab/vllm-src). Exit 0 when no gate refused,
1 otherwise. Either mode: exit 2 with one line when there is no vLLM to look at.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys

NOT_INSTALLED = "vLLM is not installed"


def _check_source(spec: str, as_json: bool) -> int:
    from ._sources import NoVllmSource, Offline, open_source
    from ._static import check_source_tree

    try:
        tree = open_source(spec)
    except NoVllmSource as exc:
        print(f"{NOT_INSTALLED} at {spec}: {exc}", file=sys.stderr)
        return 2
    except Offline as exc:
        print(f"cannot read {spec}: {exc}", file=sys.stderr)
        return 2
    result = check_source_tree(tree)
    if as_json:
        print(json.dumps({"source": tree.label, "vllm_version": tree.version,
                          "gates": result}, indent=2))
    else:
        print(f"vLLM {tree.version or '(version unknown)'} from {tree.label}: what the "
              "plugin would do")
        print("| patch / target | gate |")
        print("|---|---|")
        for name, state in result.items():
            print(f"| {name} | {state} |")
    return 1 if any(v.startswith("refused") for v in result.values()) else 0


def _status(select: str | None, as_json: bool) -> int:
    try:
        spec = importlib.util.find_spec("vllm")
    except (ImportError, ValueError):
        spec = None
    if spec is None or spec.origin in (None, "namespace"):
        print(NOT_INSTALLED, file=sys.stderr)
        return 2
    from . import ENV, apply_patches, patch_manifest

    # the status tool is asked by name: without --select or the variable, all of them
    apply_patches(select if select is not None else os.environ.get(ENV) or "all")
    manifest = patch_manifest()
    if as_json:
        print(json.dumps(manifest, indent=2, sort_keys=True))
    else:
        print(f"vLLM {manifest['vllm_version'] or '(version unknown)'}; "
              f"selection {manifest['selection']}")
        print("| patch | status | targets | checked against |")
        print("|---|---|---|---|")
        for name, info in manifest["patches"].items():
            targets = "; ".join(f"{t}: {s}" for t, s in info["targets"].items()) or "-"
            print(f"| {name} | {info['status']} | {targets} | "
                  f"{', '.join(info['checked_against'])} |")
    refused = [n for n, i in manifest["patches"].items() if i["status"].startswith("refused")]
    return 1 if refused else 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m engine.vllm.patches",
                                 description=__doc__.splitlines()[0])
    ap.add_argument("--status", action="store_true",
                    help="apply to the installed vLLM here and report (the default action)")
    ap.add_argument("--json", action="store_true", help="print the full result as JSON")
    ap.add_argument("--select", default=None,
                    help="patch selection (default: $RESIDUE_LAB_PATCHES, else all)")
    ap.add_argument("--check-source", metavar="PATH_OR_WHEEL",
                    help="run the gates on vLLM source without importing it: a directory "
                         "holding vllm/, a .whl, or vllm==X (read remotely from PyPI)")
    args = ap.parse_args(argv)
    if args.check_source:
        return _check_source(args.check_source, args.json)
    return _status(args.select, args.json)


if __name__ == "__main__":
    sys.exit(main())
