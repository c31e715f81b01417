#!/bin/bash
# Issue 35's cost curve in ONE device call (one GPU): boot the dummy-weight shapes of
# benchmarks/shapes (at once, or --in-turn one at a time), then measure, one at a time, each
# server's point (cold + self-hit), its restores side by side (the old per-view state fill,
# the once-per-storage fill, the dirty restore: issue 51) and sleep cycle
# (benchmarks/gpu_cost_curve.py), and pack what came back into $OUT: cost_curve.md (the
# table), records.jsonl, manifest.json, fill_bench.md and cost_curve.tgz (all of it, server
# logs gzipped, timings, GPU monitor): 5 files. FILL_BENCH=1 (the default with vLLM) first
# runs benchmarks/gpu_fill_bench.py (torch only, the 27B layout at 20 GiB) before any server
# holds the GPU.
# Dummy weights: cost only, no verdicts.
# Needs vLLM 0.26.0 in /tmp/site (docs/gpu-notes.md, "How to rerun on the device"); half b2
# of the bundle is unpacked first when _C is missing and .gpu/bundle/b2 was carried.
# Usage (repository root of the device's copy):
#   bash benchmarks/gpu_cost_curve.sh [LIMIT_S] [ARGS...]    # ARGS: gpu_cost_curve.py's
# Issue 51 on one 80 GB H100 or one H200 (the 27B shape alone, no sleep cycles), <= 570 s:
#   bash benchmarks/gpu_cost_curve.sh 560 --servers 27b@20 --no-sleep --gpu-gib 79
# 45.4 GiB of weights + the 20 GiB pool + 4 GiB overhead = 69.4 GiB <= 79 (an H100's
# 79.1 GiB). The call ends by LIMIT - 10 s: the driver is killed at LIMIT - 15 s and writes
# by LIMIT - 40 s (503 s after the ~17 s bench). A point starts only with 85 s left (a first
# guess of 60 s + 25 s reserve). Cold boots (2026-12-06): 242 s on one H200, then the first
# point 6 s and the 20 rounds 32 s; 265 s on one H100, where LIMIT 390 (deadline 333 s) left
# 67 s and no point ran (reports/h200/cost-restore/); a round the deadline cannot hold is
# skipped and recorded, never cut.
# The mechanism on a CPU box, the lab engine standing in for every shape (no fills):
#   ENGINE=lab OUT=/tmp/cc-out PYTHON=python3 bash benchmarks/gpu_cost_curve.sh 120 --points 3
# (the lab serves the fills' RPCs: every restore kind runs; --in-turn --no-sleep work too)
LIMIT=${1:-530}; shift
ENGINE=${ENGINE:-vllm}; PY=${PYTHON:-python3}
R=$PWD; S=$R
source "$R/engine/tinymodel/scripts/device_lib.sh"
: "${OUT:=/tmp/out}"; W=$DEV_WORK/cost_curve; rm -rf "$W"; mkdir -p "$W" "$OUT"
if [ "$ENGINE" = vllm ]; then
  [ -f /tmp/site/vllm/_C_stable_libtorch.abi3.so ] || dev_unpack_b "$W/timings.txt"
  if [ ! -d /tmp/site/vllm ]; then
    echo "gpu_cost_curve.sh: /tmp/site holds no vLLM (unpack the bundle first: docs/gpu-notes.md)"
    exit 3
  fi
  dev_vllm_env
  dev_env_txt "$W/env.txt"
  dev_monitor "$W/monitor.txt"
else
  export PYTHONPATH=$R PYTHONUNBUFFERED=1
fi
if [ "${FILL_BENCH:-$([ "$ENGINE" = vllm ] && echo 1 || echo 0)}" = 1 ]; then
  timeout 150 "$PY" benchmarks/gpu_fill_bench.py > "$W/fill_bench.md" 2> "$W/fill_bench.err"
  echo "fill bench rc=$? $(el)s" >> "$W/timings.txt"
  cp "$W/fill_bench.md" "$OUT/" 2>/dev/null
fi
START=$(el)
timeout --signal=INT -k 15 $(( LIMIT - 15 - START )) "$PY" benchmarks/gpu_cost_curve.py \
  --engine "$ENGINE" --out "$W" --deadline-s $(( LIMIT - 40 - START )) "$@" \
  > "$W/stdout.txt" 2> "$W/stderr.txt"
echo "cost curve rc=$? $(el)s (started at ${START}s)" >> "$W/timings.txt"
[ -n "$MON" ] && kill "$MON" 2>/dev/null
# a driver killed before its finally block leaves records but no table: make it now
[ -f "$W/cost_curve.md" ] || "$PY" benchmarks/gpu_cost_curve.py --summarize "$W" \
  > /dev/null 2>> "$W/stderr.txt"
cp "$W/cost_curve.md" "$W/records.jsonl" "$W/manifest.json" "$OUT/" 2>/dev/null
dev_pack cost_curve
cat "$W/timings.txt" "$W/fill_bench.md" "$W/cost_curve.md" 2>/dev/null; tail -c 1500 "$W/stderr.txt"
