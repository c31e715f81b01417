#!/bin/bash
# Issue 32, round 3 of the state hunt in ONE device call, on a machine whose /tmp/site holds
# bundle part a and /tmp/parts half b1 (docs/gpu-notes.md, "How to rerun on the device"):
# finish /tmp/site with half b2 (carried as .gpu/bundle/b2), run benchmarks/gpu_determinism.py
# (plain and deterministic fresh servers side by side on GPU 0), pack what came back into $OUT.
# Usage (repository root of the device's copy): bash benchmarks/gpu_determinism.sh LIMIT_S MACHINE [ARGS...]
LIMIT=${1:-560}; MACHINE=${2:-m1}; shift 2
R=$PWD; S=$R
source "$R/engine/tinymodel/scripts/device_lib.sh"
dev_probe_start determinism
{ nvidia-smi --query-gpu=uuid,serial,pci.bus_id --format=csv
  python3 -c "import torch._inductor.config as c; print('inductor deterministic knob:', hasattr(c, 'deterministic'))"
} >> "$W/env.txt" 2>&1
timeout --signal=INT -k 15 $(( LIMIT - 20 )) python3 benchmarks/gpu_determinism.py \
  --model "$R/engine/tinymodel/weights/hybrid" --drafter "$R/engine/tinymodel/weights/dflash" \
  --out "$W" --limit $(( LIMIT - 40 )) --machine "$MACHINE" "$@" \
  > "$W/stdout.txt" 2> "$W/stderr.txt"
echo "determinism rc=$? $(el)s" >> "$W/timings.txt"
pkill -9 -f 'vllm.entrypoints' 2>/dev/null
kill "$MON" 2>/dev/null
gzip -k "$W/records.jsonl" 2>/dev/null; cp "$W/records.jsonl.gz" "$OUT/determinism-$MACHINE.jsonl.gz" 2>/dev/null
rm -f "$W/records.jsonl"
# the generated code of the servers that compiled caches of their own (Inductor's .py, Triton's
# .json), to diff two that answered differently
( cd /tmp/rl-det-caches 2>/dev/null && find . -type f \( -name '*.py' -o -name '*.json' \) -size -1M \
    \( -path './*-det-own*' -o -path './*-det-nocombo*' \) | tar czf "$OUT/own-caches-$MACHINE.tgz" -T - )
dev_pack determinism
cat "$W/timings.txt" "$W/stdout.txt"; tail -c 1500 "$W/stderr.txt"
