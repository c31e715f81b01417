#!/bin/bash
# Device call 1 (carry .gpu/bundle/a): unpack bundle part a into /tmp/site (kept while the
# machine is held, for call 2), pre-compile its bytecode in the background, train the
# hybrid (then the dense variant if time allows), write the served layouts to $OUT and
# copy them to /tmp/tiny for call 2.   Usage: bash device_call1_train.sh [HYBRID_CAP] [DEADLINE]
HCAP=${1:-330}; DEADLINE=${2:-480}   # seconds: hybrid training cap; whole-call budget
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
: "${OUT:=/tmp/out}"; mkdir -p "$OUT" /tmp/site /tmp/tiny
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PYTHONUNBUFFERED=1
{ nvidia-smi --query-gpu=name,driver_version,memory.used,memory.total --format=csv
  python3 -c "import sys,torch,transformers,tokenizers;print(sys.version);print('torch',torch.__version__,torch.version.cuda);print('transformers',transformers.__version__,'tokenizers',tokenizers.__version__)"
  python3 -c "import fla" 2>&1 | tail -1; python3 -c "import causal_conv1d" 2>&1 | tail -1; } > "$OUT/env.txt" 2>&1
if [ -f .gpu/bundle/a/site_a.tar.xz ]; then
  tar -xJf .gpu/bundle/a/site_a.tar.xz -C /tmp/site && echo "unpack_a $(el)s" >> "$OUT/timings.txt"
  (nice python3 -m compileall -q -j 4 /tmp/site > /dev/null 2>&1; echo "compileall_done $(el)s" >> "$OUT/timings.txt") &
fi
python3 -m engine.tinymodel train --variant hybrid --out "$OUT/hybrid" --time-cap "$HCAP" \
  --workers 8 --log-next-to-out > "$OUT/stdout_hybrid.txt" 2>&1
echo "hybrid rc=$? $(el)s" >> "$OUT/timings.txt"
cp -r "$OUT/hybrid" /tmp/tiny/ 2>/dev/null
LEFT=$(( DEADLINE - $(el) - 45 ))
if [ "$LEFT" -ge 60 ]; then
  DCAP=$(( LEFT < 120 ? LEFT : 120 ))
  python3 -m engine.tinymodel train --variant dense --out "$OUT/dense" --time-cap "$DCAP" \
    --workers 8 --n 256 --log-next-to-out > "$OUT/stdout_dense.txt" 2>&1
  echo "dense rc=$? cap=${DCAP}s $(el)s" >> "$OUT/timings.txt"
  cp -r "$OUT/dense" /tmp/tiny/ 2>/dev/null
else
  echo "dense skipped (left ${LEFT}s) $(el)s" >> "$OUT/timings.txt"
fi
wait; echo "end $(el)s" >> "$OUT/timings.txt"; cat "$OUT/timings.txt"
# The run tool brings back at most 8 files of <= 16 MiB: one tar per variant (~15 MB bf16),
# one for the logs; the loose copies are removed so nothing else counts against the 8.
for v in hybrid dense; do [ -d "$OUT/$v" ] && tar -cf "$OUT/$v.tar" -C "$OUT" "$v" && rm -rf "$OUT/$v"; done
tar -cf "$OUT/logs.tar" -C "$OUT" $(cd "$OUT" && ls *.txt *.log 2>/dev/null | grep -v timings.txt) && \
  (cd "$OUT" && rm -f stdout_*.txt train_*.log env.txt)
grep -h '"variant"' "$OUT"/stdout_*.txt | cut -c1-1500
