#!/bin/bash
# Issue 32 in ONE device call, on a machine whose /tmp/site holds bundle part a and
# /tmp/parts half b1 (docs/gpu-notes.md, "How to rerun on the device"): finish /tmp/site
# with half b2 (carried as .gpu/bundle/b2), run benchmarks/gpu_poison.py (probe, plain and
# poisoned fresh servers side by side on GPU 0), pack what came back into $OUT.
# Usage (repository root of the device's copy): bash benchmarks/gpu_poison.sh LIMIT_S [ARGS...]
LIMIT=${1:-540}; shift
R=$PWD; S=$R
source "$R/engine/tinymodel/scripts/device_lib.sh"
dev_probe_start poison
timeout --signal=INT -k 15 $(( LIMIT - 25 )) python3 benchmarks/gpu_poison.py \
  --model "$R/engine/tinymodel/weights/hybrid" --out "$W" --limit $(( LIMIT - 45 )) "$@" \
  > "$W/stdout.txt" 2> "$W/stderr.txt"
echo "probe rc=$? $(el)s" >> "$W/timings.txt"
pkill -9 -f 'vllm.entrypoints' 2>/dev/null
kill "$MON" 2>/dev/null
gzip -k "$W/records.jsonl" 2>/dev/null; cp "$W/records.jsonl.gz" "$OUT/" 2>/dev/null
dev_pack poison
cat "$W/timings.txt" "$W/stdout.txt"; tail -c 1500 "$W/stderr.txt"
