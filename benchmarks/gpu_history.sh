#!/bin/bash
# Issue 52 on one H100 80GB or H200, in ONE device call of at most ~560 s, on a machine whose
# /tmp/site holds vLLM 0.26.0: the history axis on real vLLM with the committed tiny hybrid
# (engine/tinymodel/weights/hybrid, align mode), SPEC k = 3 (ngram by default; mtp for a
# second call), histories none,abort-retry,interleave,sibling,evict,next-turn at --residues
# risky, in two harness processes side by side:
#   fap_all   FULL_AND_PIECEWISE with the Bug B fix on (--patches all)
#   pw_none   PIECEWISE without it (--patches none): Bug B out of the way, what breaks is
#             the history's
# --isolation auto (a restore sweep: one server per configuration, returned to its
# just-booted state between points; then every non-ok cell and --auto-sample 1 ok residue
# per configuration confirmed on a fresh server): a fresh server per point is 72 boots, at
# ~47 s each with 8 on one GPU (reports/h200/auto-matrix-k3.md) it does not fit.
# 6 slots per process (SLOTS): each process's six restore servers (one per history) boot at
# once, 12 servers on GPU 0 in all: ten of ~6 GB (KV pinned at 4.9 GiB + weights, graphs,
# context) and two evict servers with a 134-block pool, ~62 GB of an 80 GB H100 (the restore
# runs of reports/h200 held 10 on one GPU; two processes of --gpus 0 x 8 would hold 16). The
# budgets differ per history (128, 2304, vLLM's default), so each compiles its own graphs:
# on cold compile caches a boot takes ~200 s, warm ~47 s (reports/h200/auto-matrix-k3.md).
# What each history's servers get (sweep --dry-run --engine vllm shows it; vLLM 0.26.0's
# engine/arg_utils.py and config/ checked for each flag): abort-retry --max-num-batched-tokens
# 128 (one KV block = the align-mode mamba block: a ~1,200-token prompt is ~9 chunks; the
# driver pauses scheduling with /sleep?level=0&mode=keep at the first chunk line, so the
# abort lands mid-prefill, proven from the trace's 0 < computed < of); sibling 2304 (two
# residue-0 prompts); evict --num-gpu-blocks-override 134 with --max-model-len 1792 (vLLM
# checks max_model_len against the overridden pool at boot); every history server runs with
# VLLM_SERVER_DEV_MODE=1 (/sleep, /wake_up) and RESIDUE_LAB_SCHED_TRACE=1 (the trace lines).
# Every harness runs under `timeout --signal=INT` (stops gracefully, keeps its records).
#
# What comes back (at most 8 files in $OUT): history_SPEC.tgz (records, manifests, reports,
# gzipped server logs, timings, monitor, commands), the two records files gzipped
# (history_SPEC_NAME.jsonl.gz) and history_SPEC_summary.md (timings, each report's headline
# and rule lines, benchmarks/gpu_history_summary.py's table of every cell and its proof).
#
# Usage (repository root of the device's copy, vLLM 0.26.0 in /tmp/site):
#   bash benchmarks/gpu_history.sh [LIMIT_S] [SPEC]      # defaults 560 ngram; SPEC mtp: call 2
# CPU check of the same commands on the lab engine (no GPU, no vLLM):
#   ENGINE=lab OUT=/tmp/hist-out bash benchmarks/gpu_history.sh 300
LIMIT=${1:-560}; SPEC=${2:-ngram}; ENGINE=${ENGINE:-vllm}; PY=${PYTHON:-python3}
SLOTS=${SLOTS:-6}   # HISTORIES and AUTO_SAMPLE narrow a short call (defaults: all six, 1)
R=$PWD; S=$R
source "$R/engine/tinymodel/scripts/device_lib.sh"
[ $(( LIMIT - 70 )) -gt 120 ] || { echo "gpu_history.sh: LIMIT_S $LIMIT leaves too little; give 300 or more" >&2; exit 2; }
case "$SPEC" in ngram|mtp) ;; *) echo "gpu_history.sh: SPEC must be ngram or mtp, got $SPEC" >&2; exit 2;; esac
: "${OUT:=/tmp/out}"; N=history_$SPEC; W=$DEV_WORK/$N; rm -rf "$W"; mkdir -p "$W" "$OUT"
CACHE=/tmp/residue-lab-boot-cache; mkdir -p "$CACHE"   # kept: warm from earlier calls
M=$R/engine/tinymodel/weights/hybrid
if [ "$ENGINE" = vllm ]; then
  # vLLM's _C from the bundle's halves when missing (b1 stashed by the call before, b2 carried)
  [ -f /tmp/site/vllm/_C_stable_libtorch.abi3.so ] || [ ! -d "$R/.gpu/bundle/b2" ] || dev_unpack_b "$W/timings.txt"
  [ -f /tmp/site/vllm/_C_stable_libtorch.abi3.so ] || { echo "gpu_history.sh: vLLM 0.26.0 is not in /tmp/site" >&2; exit 2; }
  dev_vllm_env; dev_env_txt "$W/env.txt"; dev_monitor "$W/monitor.txt"
  BASE=(--engine vllm --model "$M" --geometry hybrid --cache-dir "$CACHE" --boot-timeout 300
        --engine-arg=--language-model-only --engine-arg=--gpu-memory-utilization=0.07
        --launcher prefork)
  where() { printf -- "--gpus %s" "$(yes 0 | head -n "$1" | paste -sd,)"; }
else   # the lab stand-in: the vLLM hybrid's align mode, CPU slots
  export PYTHONPATH=$R PYTHONUNBUFFERED=1
  BASE=(--engine lab --engine-arg=--mamba-cache-mode=align --launcher prefork)
  where() { printf -- "--slots %s" "$1"; }
fi
COMMON=("${BASE[@]}" --spec "$SPEC" --draft-tokens 3 --ctx huge --context 1200
        --history "${HISTORIES:-none,abort-retry,interleave,sibling,evict,next-turn}"
        --residues risky --isolation auto --auto-sample "${AUTO_SAMPLE:-1}" --timeout 30
        --no-progress)
H=$(( LIMIT - 70 - $(el) ))   # every harness stops by then: 70 s for the summary + packing
PIDS=(); NAMES=()
run() {  # NAME ARGS...: one harness process in the background
  local n=$1; shift
  # shellcheck disable=SC2046
  set -- "${COMMON[@]}" "$@" $(where "$SLOTS") --out "$W/$n" --reports-dir "$W/$n"
  echo "$n: $PY -m harness $*" >> "$W/commands.txt"
  timeout --signal=INT -k 25 "$H" "$PY" -m harness "$@" > "$W/$n.stdout.txt" 2> "$W/$n.stderr.txt" &
  PIDS+=($!); NAMES+=("$n")
}
run fap_all --cudagraph FULL_AND_PIECEWISE --patches all
run pw_none --cudagraph PIECEWISE --patches none
for i in "${!PIDS[@]}"; do
  wait "${PIDS[$i]}"; echo "${NAMES[$i]} rc=$? $(el)s (limit ${H}s)" >> "$W/timings.txt"
done
[ "$ENGINE" = vllm ] && echo "vllm processes left: $(pgrep -c -f 'vllm.entrypoints|engine.prefork')" >> "$W/timings.txt"
kill "$MON" 2>/dev/null
RECS=()
for n in "${NAMES[@]}"; do
  for f in "$W/$n"/*.jsonl; do
    [ -f "$f" ] || continue
    gzip -kf "$f"; cp "$f.gz" "$OUT/${N}_${n}.jsonl.gz"; RECS+=("$f.gz")
  done
done
{ dev_summary "$W" "${NAMES[@]}"
  echo
  [ ${#RECS[@]} -gt 0 ] && PYTHONPATH=$R "$PY" "$R/benchmarks/gpu_history_summary.py" "${RECS[@]}" \
    --machine "$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1 || echo CPU lab)"
} > "$OUT/${N}_summary.md" 2>&1
echo "end $(el)s" >> "$W/timings.txt"
dev_pack "$N"
ls -la "$OUT"; cat "$W/timings.txt"; tail -3 "$W/monitor.txt" 2>/dev/null
for n in "${NAMES[@]}"; do echo "== $n"; tail -c 1500 "$W/$n.stderr.txt"; done
dev_out_check   # the call's rc: 1 only where $OUT holds more than comes back
