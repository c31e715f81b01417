#!/bin/bash
# Issue 48 in ONE device call on a machine whose /tmp/site already holds vLLM 0.26.0 (the
# bundle unpacked, docs/gpu-notes.md): benchmarks/gpu_bytes_experiment.py (ngram k = 4 and
# k = 3 servers with the mode on, each compiling its own cache, one with the candidate pins,
# then copies of another server's cache as soon as it is saved), and pack what came back into $OUT.
# Usage (repository root of the device's copy): bash benchmarks/gpu_bytes_experiment.sh LIMIT_S MACHINE
# LIMIT_S is the whole call's: the experiment gets what is left of it after the setup, less
# the packing's 20 s. A cache from another machine (this script's $OUT/bytes-cache-*.tar.xz
# of an earlier call, carried as .gpu/bytes-cache/: one machine's file, or its .partNN
# pieces) adds a k = 4 and a k = 3 server started from it at once.
LIMIT=${1:-250}; MACHINE=${2:-m1}; shift $(( $# < 2 ? $# : 2 ))
R=$PWD; S=$R
source "$R/engine/tinymodel/scripts/device_lib.sh"
dev_probe_start bytes
{ nvidia-smi -q | grep -E 'Product Name|Driver Version|CUDA Version|MIG Mode|Current  *:|Multiprocessor|Serial|Bus Id' 
  python3 -c "import torch; p=torch.cuda.get_device_properties(0); print('sm_count', p.multi_processor_count, 'L2', getattr(p, 'L2_cache_size', '?'), 'cc', p.major, p.minor, 'name', p.name); print('torch', torch.__version__, 'cuda', torch.version.cuda, 'cudnn', torch.backends.cudnn.version())"
  ls /tmp/site/vllm/vllm_flash_attn 2>/dev/null | head -5
} >> "$W/env.txt" 2>&1
FROM=()
if compgen -G "$R/.gpu/bytes-cache/*.tar.xz*" > /dev/null; then
  rm -rf /tmp/rl-bytes-carried; mkdir -p /tmp/rl-bytes-carried
  cat "$R"/.gpu/bytes-cache/*.tar.xz* | tar -xJ -C /tmp/rl-bytes-carried && FROM=(--from-cache /tmp/rl-bytes-carried/k4-own0)
  echo "carried cache $(ls "$R"/.gpu/bytes-cache | tr "\n" " ")$(du -sh /tmp/rl-bytes-carried | cut -f1) $(el)s" >> "$W/timings.txt"
fi
# this machine's own caches under a folder named for it: a carried index path that was not
# rewritten then fails to load instead of reading this machine's compile of the same name
CACHES=/tmp/rl-bytes-caches-$MACHINE
LEFT=$(( LIMIT - $(el) - 20 ))
echo "experiment limit ${LEFT}s at $(el)s" >> "$W/timings.txt"
timeout --signal=INT -k 5 $(( LEFT + 8 )) python3 benchmarks/gpu_bytes_experiment.py \
  --model "$R/engine/tinymodel/weights/hybrid" --out "$W" --limit "$LEFT" --caches "$CACHES" \
  --machine "$MACHINE" "${FROM[@]}" "$@" > "$W/stdout.txt" 2> "$W/stderr.txt"
echo "experiment rc=$? $(el)s" >> "$W/timings.txt"
# the servers this call started, by their process group (each was started in a session of its own)
while read -r pid; do kill -9 -- "-$pid" 2>/dev/null; done < "$W/pids"
kill "$MON" 2>/dev/null
python3 benchmarks/gpu_bytes_summary.py "$W/records.jsonl" > "$OUT/bytes-summary-$MACHINE.md" 2>&1
gzip -k "$W/records.jsonl" 2>/dev/null; cp "$W/records.jsonl.gz" "$OUT/bytes-records-$MACHINE.jsonl.gz" 2>/dev/null
rm -f "$W/records.jsonl"
# k4-own0's compile cache (vLLM's folder: torch.compile's artefacts and, AOT, their Inductor
# cache; Triton's JIT kernels are rebuilt from source where it lands), to carry elsewhere
( cd "$CACHES" 2>/dev/null && XZ_OPT="-T0 -3" tar -cJf "$OUT/bytes-cache-$MACHINE.tar.xz" k4-own0/vllm )
if [ "$(stat -c %s "$OUT/bytes-cache-$MACHINE.tar.xz" 2>/dev/null || echo 0)" -gt 15500000 ]; then
  split -b 15000000 -d "$OUT/bytes-cache-$MACHINE.tar.xz" "$OUT/bytes-cache-$MACHINE.tar.xz.part" \
    && rm "$OUT/bytes-cache-$MACHINE.tar.xz"
fi
echo "packed $(el)s" >> "$W/timings.txt"
dev_pack bytes
cat "$W/timings.txt" "$OUT/bytes-summary-$MACHINE.md" "$W/stdout.txt"; tail -c 1500 "$W/stderr.txt"
