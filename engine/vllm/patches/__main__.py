"""``python -m engine.vllm.patches --status [--json] [--select all|none|a,b]``

Applies the selected patches to the installed vLLM in this process (nothing is written to
disk) and prints what each one did: the same check the plugin runs in every vLLM process.
Exit status 0 when no selected patch was refused, 1 otherwise.
"""
from __future__ import annotations

import argparse
import json
import sys


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m engine.vllm.patches",
                                 description=__doc__.splitlines()[0])
    ap.add_argument("--status", action="store_true",
                    help="apply to the installed vLLM here and report (the default action)")
    ap.add_argument("--json", action="store_true", help="print the full manifest as JSON")
    ap.add_argument("--select", default=None,
                    help="patch selection (default: $RESIDUE_LAB_PATCHES, else all)")
    ap.add_argument("--check-source", metavar="DIR",
                    help="only read a vLLM source tree (DIR/vllm/...) and check the patch "
                         "targets' shapes there, without importing it")
    args = ap.parse_args(argv)

    if args.check_source:
        from ._static import check_source_tree

        result = check_source_tree(args.check_source)
        print(json.dumps(result, indent=2))
        return 1 if any(v.startswith("mismatch") for v in result.values()) else 0

    from . import apply_patches, patch_manifest

    apply_patches(args.select)
    manifest = patch_manifest()
    if args.json:
        print(json.dumps(manifest, indent=2, sort_keys=True))
    else:
        print(f"vLLM {manifest['vllm_version'] or '(not installed)'}; "
              f"selection {manifest['selection']}")
        print("| patch | status | targets | checked against |")
        print("|---|---|---|---|")
        for name, info in manifest["patches"].items():
            targets = "; ".join(f"{t}: {s}" for t, s in info["targets"].items()) or "-"
            print(f"| {name} | {info['status']} | {targets} | "
                  f"{', '.join(info['checked_against'])} |")
    refused = [n for n, i in manifest["patches"].items() if i["status"].startswith("refused")]
    return 1 if refused else 0


if __name__ == "__main__":
    sys.exit(main())
