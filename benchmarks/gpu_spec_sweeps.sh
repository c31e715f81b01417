#!/bin/bash
# Issues 17 and 18 on one H200, in ONE device call, on a machine whose /tmp/site holds vLLM
# bundle part a, /tmp/parts part b1, and /tmp/tiny/dflash the drafter trained by
# engine/tinymodel/scripts/dflash_call1_train.sh (the calls before this one):
#   0. finish /tmp/site with part b2 (carried as .gpu/bundle/b2);
#   1. at once, three harness processes through `sweep --engine vllm`, each --isolation auto
#      (reset servers for all 128 residues, cold and self-hit; fresh servers for every
#      non-ok residue, the rule's k, k+1, k+2 on two documents, and a sample):
#      dflash  --spec dflash2 (k = 7), FULL_AND_PIECEWISE,PIECEWISE x patches none,all;
#      ngram_unpatched  ngram k = 1,5 FULL_AND_PIECEWISE unpatched, documents 0,1;
#      ngram_patched    ngram k = 1..5 FULL_AND_PIECEWISE patched, documents 0,1, no sample;
#   compile and Triton caches shared under /tmp/residue-lab-boot-cache (kept for the boot
#   benchmark call after this one). Every harness runs under `timeout --signal=INT`
#   (stops gracefully, keeps its records).
# Usage (repository root of the device's copy; the code is .gpu/src, a `git archive`):
#   bash .gpu/src/benchmarks/gpu_spec_sweeps.sh [LIMIT_S]
LIMIT=${1:-585}
R=$PWD; S=$R/.gpu/src
source "$S/engine/tinymodel/scripts/device_lib.sh"
: "${OUT:=/tmp/out}"; W=$DEV_WORK/sweeps; rm -rf "$W"; mkdir -p "$W" "$OUT"
CACHE=/tmp/residue-lab-boot-cache; mkdir -p "$CACHE"
dev_unpack_b "$W/timings.txt"
dev_vllm_env
M=$R/engine/tinymodel/weights/hybrid; D=$R/engine/tinymodel/weights/dflash
rm -rf "$D"; cp -r /tmp/tiny/dflash "$D" && echo "drafter: $D ($(ls "$D" | tr '\n' ' '))" >> "$W/timings.txt"
dev_monitor "$W/monitor.txt"
cd "$S" || exit 3
H=$(( LIMIT - 45 - $(el) ))
COMMON=(--engine vllm --model "$M" --geometry hybrid --ctx huge --context 1200 --residues all
        --engine-arg=--gpu-memory-utilization=0.07 --isolation auto --cache-dir "$CACHE"
        --boot-timeout 300 --no-progress)
PIDS=(); NAMES=()
run() {  # NAME SLOTS ARGS...
  local n=$1 g=$2; shift 2
  echo "$n: sweep ${COMMON[*]} $* --gpus $g" >> "$W/commands.txt"
  timeout --signal=INT -k 25 "$H" python3 -m harness "${COMMON[@]}" "$@" --gpus "$g" \
    --out "$W/$n" --reports-dir "$W/$n" > "$W/$n.stdout.txt" 2> "$W/$n.stderr.txt" &
  PIDS+=($!); NAMES+=("$n")
}
run dflash 0,0,0,0,0,0 --spec dflash2 --draft-model "$D" \
  --cudagraph FULL_AND_PIECEWISE,PIECEWISE --patches none,all --auto-sample 2
run ngram_unpatched 0,0,0,0 --spec ngram --draft-tokens 1,5 --cudagraph FULL_AND_PIECEWISE \
  --patches none --seed 0,1 --auto-sample 1
run ngram_patched 0,0,0,0 --spec ngram --draft-tokens 1,2,3,4,5 --cudagraph FULL_AND_PIECEWISE \
  --patches all --seed 0,1 --auto-sample 0
for i in "${!PIDS[@]}"; do wait "${PIDS[$i]}"; echo "${NAMES[$i]} rc=$? $(el)s" >> "$W/timings.txt"; done
echo "vllm processes after the sweeps: $(pgrep -c -f 'vllm.entrypoints|engine.prefork')" >> "$W/timings.txt"
kill "$MON" 2>/dev/null
echo "end $(el)s" >> "$W/timings.txt"
dev_pack sweeps
ls -la "$OUT"; cat "$W/timings.txt"; tail -3 "$W/monitor.txt"
for n in "${NAMES[@]}"; do echo "== $n"; tail -c 1500 "$W/$n.stderr.txt"; tail -6 "$W/$n.stdout.txt" | cut -c1-300; done
