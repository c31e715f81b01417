#!/bin/bash
# Device call 2 (carry .gpu/bundle/b), issued right after call 1 on the same held machine:
# complete /tmp/site with vLLM's _C, then probe the trained models with vLLM 0.26.0.
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
: "${OUT:=/tmp/out}"; mkdir -p "$OUT"
ls /tmp/site/vllm > /dev/null 2>&1 || { echo "no /tmp/site: machine was not kept"; exit 3; }
tar -xJf .gpu/bundle/b/site_b.tar.xz -C /tmp/site && echo "unpack_b $(el)s" >> "$OUT/timings.txt"
SERVERS=()
[ -f /tmp/tiny/hybrid/model.safetensors ] && SERVERS+=(--server hybrid_fp=/tmp/tiny/hybrid:FULL_AND_PIECEWISE --server hybrid_pw=/tmp/tiny/hybrid:PIECEWISE)
[ -f /tmp/tiny/dense/model.safetensors ] && SERVERS+=(--server dense_fp=/tmp/tiny/dense:FULL_AND_PIECEWISE)
PYTHONPATH=/tmp/site python3 -m engine.tinymodel probe "${SERVERS[@]}" --out "$OUT/probe" \
  --residues "${RESIDUES:-3,4,5,60}" --context 1200 --boot-timeout 240 --gpu-util 0.2
echo "probe rc=$? $(el)s" >> "$OUT/timings.txt"; cat "$OUT/timings.txt"
# <= 8 files of <= 16 MiB come back: one tar of the probe folder (logs, probe.json, metrics).
tar -czf "$OUT/probe.tgz" -C "$OUT" probe && rm -rf "$OUT/probe"
