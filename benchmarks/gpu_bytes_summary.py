"""The tables and the answer of ``gpu_bytes_experiment.py``'s records (issue 48): per server
its GPU, compile fingerprint, cache hit or miss, and each cell's verdict and sha1; then
whether a broken cell's bytes follow the compile cache, the machine, or neither, as far as
the records can say (one machine: "the machine" reads "every compile of this machine")."""
from __future__ import annotations

import gzip
import json
from collections import defaultdict
from pathlib import Path

__all__ = ["KNOWN", "load", "servers", "verdict_of", "answer", "summarize"]

#: answers already seen for doc 0 (issue 48's table, reports/h200/bytes): a cell's sha1 is
#: named by where it was seen, so a run on another machine says which class it fell in
KNOWN = {"95c227a4fecf": "H200s' class",
         "5f2f1596bf8d": "the document",
         "5d12df70bf43": "h200a's k3 self-hit",
         "d09a0f59410e": "H100 B's class",
         "e68577bf47a4": "H100 A's class",
         "d6dde30c60b9": "H100 A and B, k3 sweep rerun"}


def load(paths) -> list[dict]:
    out = []
    for p in paths:
        opener = gzip.open if str(p).endswith(".gz") else open
        with opener(p, "rt") as f:
            out += [json.loads(line) for line in f if line.strip()]
    return out


def servers(records: list[dict]) -> dict[str, dict]:
    """Per server: kind, k, machine, GPU, fingerprint, cache, source and its cells
    ``{(residue, phase): (ok, sha)}``."""
    out: dict[str, dict] = defaultdict(lambda: {"cells": {}})
    for r in records:
        s = out[r["server"]] if "server" in r else None
        if s is None:
            continue
        for key in ("kind", "k", "machine", "source", "pin"):
            if key in r:
                s[key] = r[key]
        if r.get("boot") == "ready":
            s["gpu"] = ", ".join(f"{g.get('model')} ({g.get('index')})" for g in r.get("gpu") or ())
            s["fingerprint"] = (r.get("compile") or {}).get("fingerprint")
            s["compile_cache"] = r.get("compile_cache")
        if "sha" in r:
            s["cells"][(r["residue"], r["phase"])] = (bool(r.get("ok")), r["sha"])
        if "error" in r or r.get("boot") == "timeout" or "skipped" in r:
            s["problem"] = r.get("error") or r.get("boot") or r.get("skipped")
    return dict(out)


def verdict_of(cell) -> str:
    if cell is None:
        return "–"
    ok, sha = cell
    return (f"ok {sha}" if ok else f"not ok {sha}") + (f" ({KNOWN[sha]})" if sha in KNOWN else "")


def _broken_cells(group: list[dict]) -> set:
    return {c for s in group for c, (ok, _) in s["cells"].items() if not ok}


def answer(srv: dict[str, dict], k: int) -> str:
    """What the k cells' broken bytes follow, from the own servers (each its own compile on
    this machine), the copies (another server's cache) and the pinned server."""
    own = [s for _, s in sorted(srv.items())
           if s.get("k") == k and s.get("kind") == "own" and s["cells"]]
    if not own:
        return f"ngram k = {k}: no own-cache server answered: no answer"
    cells = sorted(_broken_cells(own))
    if not cells:
        return f"ngram k = {k}: no cell broke on the own-cache servers"
    agree = all(len({s["cells"].get(c) for s in own}) == 1 for c in cells)
    fps = {s.get("fingerprint") for s in own}
    lines = [f"ngram k = {k}: {len(own)} own-cache server{'s' if len(own) != 1 else ''}, "
             f"{len(fps)} fingerprint{'s' if len(fps) != 1 else ''}; "
             + ("one compile only: its broken cells are the reference" if len(own) < 2 else
                "their broken cells gave one answer each: every compile of this machine agrees"
                " (the bytes follow the machine, or what its compiles share)" if agree else
                "their broken cells gave other answers between compiles")]
    names = {n: s for n, s in srv.items()}
    for n, s in names.items():
        if s.get("k") != k or s.get("kind") not in ("copy", "carried", "pin") or not s["cells"]:
            continue
        ref = names.get(s.get("source"), own[0])
        same = all(s["cells"].get(c) == ref["cells"].get(c) for c in cells)
        whom = ("its source" if s.get("source") in names else
                "this machine's first own server" + (f" (its cache: {s['source']})"
                                                     if s.get("source") else ""))
        lines.append(f"- {n} ({s['kind']}, fingerprint {s.get('fingerprint')}, cache "
                     f"{s.get('compile_cache')}): "
                     f"{'the same bytes as' if same else 'other bytes than'} {whom}")
    return "\n".join(lines)


def summarize(paths) -> str:
    srv = servers(load(paths))
    cols = sorted({c for s in srv.values() for c in s["cells"]})
    head = ["server", "kind", "GPU", "fingerprint", "cache"] + [f"r{r} {p}" for r, p in cols]
    rows = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name, s in sorted(srv.items()):
        rows.append("| " + " | ".join([name, str(s.get("kind")), s.get("gpu") or "?",
                                       f"`{s.get('fingerprint')}`", str(s.get("compile_cache"))]
                                      + [verdict_of(s["cells"].get(c)) for c in cols]) + " |")
        if s.get("problem"):
            rows.append(f"|  | {s['problem'][:200]} |" + " |" * (len(head) - 2))
    return "\n".join(rows + [""] + [answer(srv, k) for k in (4, 3)]) + "\n"


if __name__ == "__main__":
    import sys
    print(summarize([Path(p) for p in sys.argv[1:]]))
