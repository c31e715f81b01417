"""Group the H200 phase-2 answers by sha1 across every cell (run x configuration x residue x
phase) and list the cells whose answer differs from the most common one.

Every cell of these sweeps is `diverged` against the passage (the tiny model makes the same
content error on the harness's seed-0 document), so the verdicts cannot separate a serving
bug from the model's own error; comparing the answers with each other can.
Usage: python reports/h200/phase2/answer_groups.py [reports/h200/phase2/results/*.jsonl.gz]
"""
import collections
import glob
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
from harness.records.store import read_jsonl  # noqa: E402

files = sys.argv[1:] or sorted(glob.glob(str(Path(__file__).parent / "results" / "*.jsonl.gz")))
recs = [r for f in files for r in read_jsonl(f)]
groups = collections.Counter(r["sha1"] for r in recs)
modal, n = groups.most_common(1)[0]
print(f"{len(recs)} records in {len(files)} runs; {len(groups)} distinct answers; "
      f"modal sha1 {modal[:12]} in {n} records")
cells = collections.defaultdict(collections.Counter)
for r in recs:
    key = (r["isolation"], r["config"]["cudagraph_mode"], r["patches"])
    cells[key][(r["phase"], r["sha1"] == modal)] += 1
print("\n| isolation | cudagraph | patches | cold = modal | cold differs | self-hit = modal | self-hit differs |")
print("|---|---|---|---|---|---|---|")
for (iso, cg, p), c in sorted(cells.items()):
    print(f"| {iso} | {cg} | {p} | {c[('cold', True)]} | {c[('cold', False)]} | "
          f"{c[('self-hit', True)]} | {c[('self-hit', False)]} |")
print("\ncells that differ from the modal answer:")
for r in recs:
    if r["sha1"] != modal:
        print(f"- {r['isolation']} {r['config']['cudagraph_mode']} patches={r['patches']} "
              f"residue {r['residue']} {r['phase']}: templated {r['templated_len']}, cached "
              f"{r['cached_tokens']}, {r['completion_tokens']} tokens, {r['tok_per_step']} tok/step, "
              f"answer {r['answer'][:120]!r}")
