#!/bin/bash
# Issue 26 on one H200, in ONE device call of at most ~400 s: other shapes of the Bug B class
# on real vLLM 0.26.0 (unpacked in /tmp/site), the committed tiny hybrid
# (engine/tinymodel/weights/hybrid, with its MTP head), ngram k = 3 and MTP k = 3,
# FULL_AND_PIECEWISE unpatched and patched, prefix caching off, chunk budget 512
# (--max-model-len from CTX=huge; --max-num-seqs 64 because vLLM refuses a budget below
# max_num_seqs, 1024 by default on an H200; 8 for the preemption pools, see below). Four kinds of
# harness processes at once, through `sweep` (docs/shapes.md):
#   a_budget   fresh servers, unpatched, residues 3,4,5 mod 512 (--modulus auto): does a cold
#              prompt of L = 2*512 + 4 = 1,028 tokens break, as the lab does and the rule
#              predicts? (a_budget_patched: residue 4 with the fix)
#   b_load     --load 4 (four background conversations decoding beside each measured
#              request), reset servers, residues 4, 100, 484: lone, 4 breaks (rule) and
#              484 (L = 996) is clean; under load MTP's prefill runs in 512 - 4*4 = 496-token
#              chunks, so 996 = 2*496 + 4 ends in a 4-token chunk beside 4 decode steps;
#   b_load_fresh  the same for MTP unpatched on fresh servers, residues 4 and 484 (on
#              2026-12-01 484 was clean on a reset server: fresh is the thread's standard);
#   c_preempt_N  --load 4 with an N-block KV pool (N = 24, 36, 54: one server each) and
#              max_model_len 4096: the measured request is preempted and recomputed where
#              the pool is just big enough to admit it; records count the preemptions
#              (the measured request's own from the trace) and the report says where none.
# Proof that the shapes were scheduled: RESIDUE_LAB_SCHED_TRACE=1 makes the patch plugin
# log every final prefill chunk with its batch (engine/vllm/patches/sched_trace.py); each
# record's final_chunk (from prompt/cached tokens and the budget) and load.beside (from that
# log line) carry it; load.running_before/after and preemptions come from /metrics.
# Every harness runs under `timeout --signal=INT` (stops gracefully, keeps its records).
#
# What comes back: a call returns at most 8 files from $OUT, shared with any script run beside
# this one, so $OUT gets two (docs/gpu-notes.md, "What comes back"): shapes.tgz (reports,
# records, manifests, gzipped server logs, timings, monitor, commands; 15 MB parts if larger)
# and shapes_summary.md (timings, each report's headline, rule and Load lines, and the error
# lines of servers that failed to boot). The 2026-12-01 run copied the six reports out too
# (9 files with the other script's): the tgz, with every record and log, did not come back.
#
# Usage (repository root of the device's copy, vLLM 0.26.0 in /tmp/site):
#   bash benchmarks/gpu_shapes.sh [LIMIT_S]          # default 400
# CPU check of the same sweep commands on the lab engine (no GPU, no vLLM):
#   ENGINE=lab OUT=/tmp/shapes-out bash benchmarks/gpu_shapes.sh 300
# PYTHON: the interpreter of the harness (default python3; the tests pass their own)
LIMIT=${1:-400}; ENGINE=${ENGINE:-vllm}; PY=${PYTHON:-python3}
R=$PWD; S=$R
source "$R/engine/tinymodel/scripts/device_lib.sh"
: "${OUT:=/tmp/out}"; W=$DEV_WORK/shapes; rm -rf "$W"; mkdir -p "$W" "$OUT"
CACHE=/tmp/residue-lab-boot-cache; mkdir -p "$CACHE"
if [ "$ENGINE" = vllm ]; then
  [ -f /tmp/site/vllm/_C_stable_libtorch.abi3.so ] || [ ! -d "$R/.gpu/bundle/b2" ] \
    || dev_unpack_b "$W/timings.txt"
  dev_vllm_env
  export RESIDUE_LAB_SCHED_TRACE=1
  dev_env_txt "$W/env.txt"
  dev_monitor "$W/monitor.txt"
  M=$R/engine/tinymodel/weights/hybrid
  ENG=(--engine vllm --model "$M" --launcher prefork --cache-dir "$CACHE"
       --engine-arg=--gpu-memory-utilization=0.05)
  SEQS=(--engine-arg=--max-num-seqs=64)
  # Pools of 24, 36 and 54 blocks (256-token attention blocks, the hybrid's promoted
  # block; the GDN groups take blocks too, 1 or 1 + k per request: not known for 0.26.0):
  # the one just above what the four background prompts and the measured one need when
  # admitted is exhausted by the first background block growth, which preempts the newest
  # running request, the measured one. max_model_len 4096 fits each pool.
  # --max-num-seqs 8, not 64: on 2026-12-01 all three pools failed to boot with 64 (logs
  # lost). vLLM 0.26.0 refuses FULL decode graphs on a mamba/GDN model when max_num_seqs
  # exceeds the pool's blocks (config/compilation.py: "max_num_seqs (...) exceeds available
  # Mamba cache blocks"), the likely cause (read in the source, not confirmed); 8 >= 5
  # requests (4 background + the measured one) and <= 24 blocks.
  PREEMPT=(--max-model-len 4096 --timeout 60 --engine-arg=--max-num-seqs=8); POOLS=(24 36 54)
  SLOTS_A=0,0,0,0,0,0; SLOTS_P=0,0; SLOTS_B=0,0,0,0; SLOTS_F=0,0; SLOTS_C=0   # 17 servers at once
else   # the lab engine stands in: the same sweeps, its own model, a small KV pool by bytes
  export PYTHONPATH=$R PYTHONUNBUFFERED=1
  ENG=(--engine lab); SEQS=()
  PREEMPT=(--max-model-len 3072 --kv-cache-memory-bytes 62000000 --timeout 60); POOLS=(lab)
  SLOTS_A=; SLOTS_P=; SLOTS_B=; SLOTS_F=; SLOTS_C=
fi
H=$(( LIMIT - 50 - $(el) ))
COMMON=("${ENG[@]}" --geometry hybrid --ctx huge --context 1024 --modulus auto
        --no-prefix-cache --max-num-batched-tokens 512 --cudagraph FULL_AND_PIECEWISE
        --draft-tokens 3 --phases cold --boot-timeout $(( H - 40 )) --no-progress)
PIDS=(); NAMES=()
run() {  # NAME SLOTS ARGS...: one harness process in the background
  local n=$1 g=$2; shift 2
  local slots=(--slots 1); [ -n "$g" ] && slots=(--gpus "$g")
  echo "$n: sweep ${COMMON[*]} $* ${slots[*]}" >> "$W/commands.txt"
  timeout --signal=INT -k 25 "$H" "$PY" -m harness "${COMMON[@]}" "$@" "${slots[@]}" \
    --out "$W/$n" --reports-dir "$W/$n" > "$W/$n.stdout.txt" 2> "$W/$n.stderr.txt" &
  PIDS+=($!); NAMES+=("$n")
}
run a_budget "$SLOTS_A" "${SEQS[@]}" --spec ngram,mtp --patches none --isolation fresh --residues 3,4,5
run a_budget_patched "$SLOTS_P" "${SEQS[@]}" --spec ngram,mtp --patches all --isolation fresh --residues 4
run b_load "$SLOTS_B" "${SEQS[@]}" --spec ngram,mtp --patches none,all --isolation reset --residues 4,100,484 \
  --load 4
# b_load_fresh: MTP under --load 4 on FRESH servers, each measured request its server's first:
# on 2026-12-01 the one batched 4-token chunk (484) was clean on a reset server, which can
# mask a break (docs/shapes.md); 4 is the control (a 36-token chunk under load)
run b_load_fresh "$SLOTS_F" "${SEQS[@]}" --spec mtp --patches none --isolation fresh \
  --residues 4,484 --load 4
for b in "${POOLS[@]}"; do   # ~3,560 tokens on the lab (by bytes)
  pool=(); [ "$b" != lab ] && pool=(--engine-arg=--num-gpu-blocks-override="$b")
  run "c_preempt_$b" "$SLOTS_C" --spec mtp --patches none --isolation reset --residues 4,484 \
    --load 4 "${PREEMPT[@]}" "${pool[@]}"
done
for i in "${!PIDS[@]}"; do wait "${PIDS[$i]}"; echo "${NAMES[$i]} rc=$? $(el)s" >> "$W/timings.txt"; done
[ "$ENGINE" = vllm ] && echo "vllm processes after the sweeps: $(pgrep -c -f 'vllm.entrypoints|engine.prefork')" >> "$W/timings.txt"
# what the server logs say was scheduled (the trace lines), per sweep
for n in "${NAMES[@]}"; do
  echo "== $n: final prefill chunks logged: $(cat "$W/$n"/*.logs/*.log 2>/dev/null | grep -c 'final prefill chunk:'), preemptions logged: $(cat "$W/$n"/*.logs/*.log 2>/dev/null | grep -c 'preempted request=')" >> "$W/timings.txt"
done
[ -n "$MON" ] && kill "$MON" 2>/dev/null
echo "end $(el)s" >> "$W/timings.txt"
dev_summary "$W" "${NAMES[@]}" > "$OUT/shapes_summary.md"   # readable without unpacking the tgz
dev_pack shapes   # the reports, records, manifests, logs and timings: all inside the tgz
ls -la "$OUT"; cat "$W/timings.txt"
for n in "${NAMES[@]}"; do
  echo "== $n"; grep -E "Bug B rule|clean|broken|diverged" "$W/$n.stdout.txt" | head -8
  tail -c 600 "$W/$n.stderr.txt"
done
