#!/bin/bash
# Issue 17 on one H200, in ONE device call, on a machine whose /tmp/site holds bundle part a
# and /tmp/parts part b1 (the two short calls before it: docs/gpu-notes.md, "Issue 17"):
#   0. finish /tmp/site with part b2 (carried as .gpu/bundle/b2);
#   1. the README's 4-configuration matrix on the tiny hybrid (ngram k=3, CTX=huge,
#      FULL_AND_PIECEWISE,PIECEWISE x patches none,all) with --isolation auto from one
#      harness process: reset servers for all 128 residues, fresh confirmations booting
#      beside them (8 slots on GPU 0), servers forked from a pre-imported parent, compile
#      and Triton caches shared under a cache folder that starts empty (a cold machine);
#   2. with the time left, benchmarks/gpu_boot.py on that (now warm) cache folder: the boot
#      with and without the pre-imported launcher, answers compared cell by cell.
# Every harness runs under `timeout --signal=INT` (stops gracefully, keeps its records).
# Usage (repository root of the device's copy; the code is .gpu/src, a `git archive`):
#   bash .gpu/src/benchmarks/gpu_auto.sh [LIMIT_S] [MATRIX_S]
LIMIT=${1:-590}; MATRIX_S=${2:-430}
R=$PWD; S=$R/.gpu/src
source "$S/engine/tinymodel/scripts/device_lib.sh"
: "${OUT:=/tmp/out}"; W=$DEV_WORK/auto; rm -rf "$W"; mkdir -p "$W" "$OUT"
CACHE=/tmp/residue-lab-boot-cache; rm -rf "$CACHE"
dev_unpack_b "$W/timings.txt"
dev_vllm_env
M=$R/engine/tinymodel/weights/hybrid
dev_monitor "$W/monitor.txt"
cd "$S" || exit 3
CMD=(python3 -m harness --engine vllm --model "$M" --geometry hybrid --spec ngram --ctx huge
     --engine-arg=--language-model-only --engine-arg=--gpu-memory-utilization=0.07
     --draft-tokens 3 --cudagraph FULL_AND_PIECEWISE,PIECEWISE --patches none,all
     --isolation auto --auto-sample 2 --residues all --context 1200
     --gpus 0,0,0,0,0,0,0,0 --launcher prefork --cache-dir "$CACHE" --boot-timeout 300
     --no-progress --out "$W/matrix" --reports-dir "$W/matrix")
echo "matrix: ${CMD[*]}" >> "$W/commands.txt"
timeout --signal=INT -k 25 "$MATRIX_S" "${CMD[@]}" > "$W/matrix.stdout.txt" 2> "$W/matrix.stderr.txt"
echo "matrix rc=$? $(el)s" >> "$W/timings.txt"
echo "vllm processes after the matrix: $(pgrep -c -f 'vllm.entrypoints|engine.prefork')" >> "$W/timings.txt"
LEFT=$(( LIMIT - 45 - $(el) ))
if [ "$LEFT" -gt 120 ]; then
  python3 benchmarks/gpu_boot.py --model "$M" --out "$W/boot" --rounds 3 --variants caches,both \
    --budget-s "$LEFT" --cache-dir "$CACHE" > "$W/boot.stdout.txt" 2>&1
  echo "gpu_boot rc=$? $(el)s (budget ${LEFT}s)" >> "$W/timings.txt"
else
  echo "gpu_boot not run: ${LEFT}s left" >> "$W/timings.txt"
fi
kill "$MON" 2>/dev/null
echo "end $(el)s" >> "$W/timings.txt"
dev_pack auto
ls -la "$OUT"; cat "$W/timings.txt"; tail -3 "$W/monitor.txt"
tail -c 2500 "$W/matrix.stderr.txt"; grep -A12 "## Timing" "$W/matrix.stdout.txt" | head -30
tail -25 "$W/boot.stdout.txt" 2>/dev/null
