#!/bin/bash
# Issue 24, "Find the state", in ONE device call, on a machine whose /tmp/site holds bundle
# part a and /tmp/parts part b1 (docs/gpu-notes.md, "How to rerun on the device"):
# finish /tmp/site with part b2 (carried as .gpu/bundle/b2), then run
# benchmarks/gpu_find_state.py (plain + sleep-mode servers side by side, one kind of state
# restored at a time) and pack what came back into $OUT.
# Usage (repository root of the device's copy): bash benchmarks/gpu_find_state.sh [LIMIT_S]
LIMIT=${1:-420}
R=$PWD; S=$R
source "$R/engine/tinymodel/scripts/device_lib.sh"
dev_probe_start find_state
timeout --signal=INT -k 20 $(( LIMIT - 30 )) python3 benchmarks/gpu_find_state.py \
  --model "$R/engine/tinymodel/weights/hybrid" --out "$W" --boot-timeout 300 \
  > "$W/stdout.txt" 2> "$W/stderr.txt"
echo "probe rc=$? $(el)s" >> "$W/timings.txt"
echo "vllm processes after: $(pgrep -c -f 'vllm.entrypoints')" >> "$W/timings.txt"
kill "$MON" 2>/dev/null
dev_pack find_state
cat "$W/timings.txt" "$W/stdout.txt"; tail -c 1500 "$W/stderr.txt"
