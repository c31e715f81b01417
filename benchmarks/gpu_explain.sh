#!/bin/bash
# Issue 23 item 10 on one H200, in ONE device call of at most LIMIT_S (default 290) seconds:
# `sweep explain` of a real residue-4 break on a cold machine must finish, every rung judged.
#   1. a small real run with the break: the committed tiny hybrid (engine/tinymodel/weights/
#      hybrid), ngram k = 3, CTX=huge, FULL_AND_PIECEWISE, patches none, residues 3,4,5 on
#      fresh servers (three at once on GPU 0), forked from a pre-imported parent, compile and
#      Triton caches in /tmp/residue-lab-boot-cache (gpu_auto.sh's; COLD=1 uses an empty one:
#      a cold machine, whose first boots took 195-280 s in earlier calls);
#   2. `sweep explain` of that run: one rung alone first (warming the shared caches, on 3x
#      the boot timeout), then PARALLEL_BOOTS at once, on ten slots of GPU 0;
#   3. `sweep report` of the parent (with its Explained section); everything packed to $OUT.
# Each harness runs under `timeout --signal=INT` (it stops gracefully and keeps its records).
# Assumes vLLM 0.26.0 unpacked in /tmp/site (docs/gpu-notes.md) and the source tree as the
# working directory (the repository root).
#   bash benchmarks/gpu_explain.sh [LIMIT_S] [PARENT_S]      (COLD=1: empty the caches first)
# CPU stand-in (no GPU, no vLLM: the lab engine, the same commands otherwise):
#   LAB=1 OUT=/tmp/out bash benchmarks/gpu_explain.sh 280 60
LIMIT=${1:-290}; PARENT_S=${2:-120}
# 2026-12-02 (H200, cold caches): 4 at once after the warm-up left the 10th rung unrun
# at a 216 s budget; twelve servers booted together there in ~65 s each (warm caches)
PARALLEL_BOOTS=${PARALLEL_BOOTS:-9}
R=$PWD; S=${S:-$PWD}
source "$S/engine/tinymodel/scripts/device_lib.sh"
: "${OUT:=/tmp/out}"; W=$DEV_WORK/explain; rm -rf "$W"; mkdir -p "$W" "$OUT"
# COLD=1: caches of its own, emptied first (the shared ones may be warm from an earlier
# call, and other scripts beside this one keep using them)
CACHE=/tmp/residue-lab-boot-cache${COLD:+-explain-cold}; [ -n "${COLD:-}" ] && rm -rf "$CACHE"
cd "$S" || exit 3
if [ -n "${LAB:-}" ]; then
  ENGINE=(--engine lab --spec ngram --draft-tokens 3 --ctx huge)
  PARENT_SLOTS=(--slots 3); EXPLAIN_SLOTS=(--slots 10); BOOT=(--boot-timeout 60)
  LAUNCH=()
else
  dev_vllm_env
  dev_env_txt "$W/env.txt"
  dev_monitor "$W/monitor.txt"
  M=$R/engine/tinymodel/weights/hybrid
  ENGINE=(--engine vllm --model "$M" --geometry hybrid --spec ngram --draft-tokens 3 --ctx huge
          --engine-arg=--language-model-only --engine-arg=--gpu-memory-utilization=0.07)
  PARENT_SLOTS=(--gpus 0,0,0); EXPLAIN_SLOTS=(--gpus 0,0,0,0,0,0,0,0,0,0)
  # a cold boot (empty compile and Triton caches) took 227-265 s on the H200: with 150 s
  # every parent server timed out (2026-12-02, call 4)
  BOOT_S=${BOOT_TIMEOUT:-150}; [ -n "${COLD:-}" ] && BOOT_S=${BOOT_TIMEOUT:-420}
  BOOT=(--boot-timeout "$BOOT_S")
  LAUNCH=(--launcher prefork --cache-dir "$CACHE")
fi
PARENT=(python3 -m harness "${ENGINE[@]}" --cudagraph FULL_AND_PIECEWISE --patches none
        --isolation fresh --residues 3,4,5 --context 1200 "${PARENT_SLOTS[@]}" "${BOOT[@]}"
        "${LAUNCH[@]}" --no-progress --out "$W/results" --reports-dir "$W/results")
echo "parent: ${PARENT[*]}" >> "$W/commands.txt"
timeout --signal=INT -k 20 "$PARENT_S" "${PARENT[@]}" > "$W/parent.stdout.txt" 2> "$W/parent.stderr.txt"
echo "parent rc=$? $(el)s" >> "$W/timings.txt"
RUN=$(grep -oE 'run [0-9]{8}-[0-9]{6}-[0-9a-f]{4}' "$W/parent.stderr.txt" | head -1 | cut -d' ' -f2)
LEFT=$(( LIMIT - 25 - $(el) ))
if [ -n "$RUN" ] && [ "$LEFT" -gt 30 ]; then
  EXPLAIN=(python3 -m harness explain "$RUN" --out "$W/results" "${EXPLAIN_SLOTS[@]}"
           "${BOOT[@]}" "${LAUNCH[@]}" --parallel-boots "$PARALLEL_BOOTS")
  echo "explain: ${EXPLAIN[*]}" >> "$W/commands.txt"
  timeout --signal=INT -k 20 "$LEFT" "${EXPLAIN[@]}" > "$W/explain.stdout.txt" 2> "$W/explain.stderr.txt"
  echo "explain rc=$? $(el)s (budget ${LEFT}s)" >> "$W/timings.txt"
  python3 -m harness report "$RUN" --out "$W/results" -o "$W/report.md" > /dev/null 2>> "$W/timings.txt"
  echo "report rc=$? $(el)s" >> "$W/timings.txt"
else
  echo "explain not run: run '${RUN}', ${LEFT}s left" >> "$W/timings.txt"
fi
[ -n "${MON:-}" ] && kill "$MON" 2>/dev/null
echo "servers left: $(pgrep -c -f 'vllm.entrypoints|engine.prefork|engine.lab' || true)" >> "$W/timings.txt"
echo "end $(el)s" >> "$W/timings.txt"
# the records stay .jsonl (the tgz compresses them): gzipped in place, a later
# `sweep explain --resume` on this machine found no records file
dev_pack explain
ls -la "$OUT"; cat "$W/timings.txt"; tail -3 "$W/monitor.txt" 2>/dev/null
tail -c 1500 "$W/parent.stderr.txt"; tail -c 2500 "$W/explain.stderr.txt" 2>/dev/null
cat "$W/explain.stdout.txt" 2>/dev/null | tail -40
