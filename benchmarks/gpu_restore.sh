#!/bin/bash
# Issue 24, --isolation restore on one H200, in ONE device call (vLLM 0.26.0 unpacked in
# /tmp/site; the cwd is the repository root). Stages, in priority order, all started at
# once side by side on GPU 0 (each harness under `timeout --signal=INT`: a stage cut short
# keeps its records and its report says what did not run):
#   a   restore_probe.py: one sleep-mode server, ngram k=2 FULL_AND_PIECEWISE unpatched,
#       residue 3 (fresh-breaking): first request, self-hit, reset, history + reset,
#       restore (the harness's proof: is_sleeping, gauge, allocator line), history +
#       restore x2, sleep/wake without reset, history + reset again (1 server);
#   b   the README matrix (ngram k=3, FULL_AND_PIECEWISE,PIECEWISE x patches none,all) on
#       documents 0,1 with --isolation auto: restore servers for all 128 residues, plain
#       fresh servers for every non-ok cell, the rule's k..k+2 and 1 sampled residue per
#       configuration and document (B_SLOTS slots, default 8). Alone on a cold machine
#       (issue 24's "one 10-minute call"): B_SLOTS=12 BOOT_TIMEOUT=420 ... 585 b: the four
#       restore servers and eight fresh ones compile together (~250 s when 13 did), then
#       the restore passes and the remaining fresh confirmations run on warm caches;
#   c1  auto (restore + plain fresh) for ngram k=2,4 FULL_AND_PIECEWISE unpatched, documents
#       0,1 (the cells a reset sweep masked on the H200) (3 slots);
#   p   after a: sleep-mode *fresh* servers (--isolation fresh --engine-arg=--enable-sleep-mode,
#       plain launcher: also the plain boot cost)
#       on residues 2-6 of ngram k=2,4 unpatched, document 0, against c1's plain fresh
#       servers on the same cells (2 slots);
#   n   b's no-false-positive check (issue 32): restore with --poison off (the sleep cycle,
#       tuned kernels) for patched FULL_AND_PIECEWISE and unpatched PIECEWISE, document 0
#       (1 slot each), against b's restore records with the mode on;
#   c2  (a second call) auto for ngram k=3,5, MTP k=1,3 and DFlash k=7, unpatched;
#   c3  (a third call) auto for ngram k=2..5, MTP k=3 and DFlash k=7, patched.
# Then benchmarks/compare_isolation.py (every cell measured both ways: same verdict,
# byte-identical ok answers) and benchmarks/isolation_cost.py (per-point cost) on what ran.
# Usage: bash benchmarks/gpu_restore.sh [LIMIT_S] [STAGES]     (defaults: 540 a,b,c1,p)
#        ENGINE=lab bash benchmarks/gpu_restore.sh 300 a,c1    (CPU stand-in, lab engine)
LIMIT=${1:-540}; STAGES=${2:-a,b,c1,p}; ENGINE=${ENGINE:-vllm}
R=$PWD; S=$R
source "$R/engine/tinymodel/scripts/device_lib.sh"
[ $(( LIMIT - 60 )) -gt 120 ] || { echo "gpu_restore.sh: LIMIT_S $LIMIT leaves $(( LIMIT - 60 ))s for the stages; give 300 or more" >&2; exit 2; }
: "${OUT:=/tmp/out}"; W=$DEV_WORK/restore; rm -rf "$W"; mkdir -p "$W" "$OUT"
CACHE=/tmp/residue-lab-boot-cache; mkdir -p "$CACHE"   # kept: warm from earlier calls
M=$R/engine/tinymodel/weights/hybrid; D=$R/engine/tinymodel/weights/dflash
has() { [[ ",$STAGES," == *",$1,"* ]]; }
if [ "$ENGINE" = vllm ]; then
  # vLLM's _C from bundle half b2 when /tmp/site does not have it yet (docs/gpu-notes.md)
  [ -f /tmp/site/vllm/_C_stable_libtorch.abi3.so ] || dev_unpack_b "$W/timings.txt"
  dev_vllm_env; dev_env_txt "$W/env.txt"; dev_monitor "$W/monitor.txt"
  BASE=(--engine vllm --model "$M" --geometry hybrid --cache-dir "$CACHE" --boot-timeout "${BOOT_TIMEOUT:-300}"
        --engine-arg=--gpu-memory-utilization=0.07 --launcher prefork)
  PROBE_GPU=(--gpu 0)
else   # the lab stand-in: the vLLM 0.26.0 hybrid's align mode, CPU slots
  export PYTHONPATH=$R PYTHONUNBUFFERED=1
  BASE=(--engine lab --engine-arg=--mamba-cache-mode=align --launcher prefork)
  PROBE_GPU=()
fi
COMMON=("${BASE[@]}" --ctx huge --context 1200 --residues all --no-progress)
H=$(( LIMIT - 60 - $(el) ))   # every harness stops by then: 60 s for comparisons + packing
PIDS=(); NAMES=()
where() {  # N slots -> --gpus 0,0,... (vllm) or --slots N (lab)
  if [ "$ENGINE" = vllm ]; then printf -- "--gpus %s" "$(yes 0 | head -n "$1" | paste -sd,)"
  else printf -- "--slots %s" "$1"; fi
}
run() {  # NAME SLOTS TIMEOUT ARGS...: one harness process in the background
  local n=$1 k=$2 t=$3; shift 3
  # shellcheck disable=SC2046
  set -- "${COMMON[@]}" "$@" $(where "$k") --out "$W/$n" --reports-dir "$W/$n"
  echo "$n: python3 -m harness $*" >> "$W/commands.txt"
  timeout --signal=INT -k 25 "$t" python3 -m harness "$@" > "$W/$n.stdout.txt" 2> "$W/$n.stderr.txt" &
  PIDS+=($!); NAMES+=("$n")
}
DFLASH=(--spec dflash2 --draft-tokens 7); [ "$ENGINE" = vllm ] && DFLASH+=(--draft-model "$D")
has b && run b "${B_SLOTS:-8}" "$H" --spec ngram --draft-tokens 3 --cudagraph FULL_AND_PIECEWISE,PIECEWISE \
  --patches none,all --seed 0,1 --isolation auto --auto-sample 1
# n (issue 32): the mode's no-false-positive check, its "off" side: the sleep cycle, no fill,
# kernels tuned by timing, for b's patched FULL_AND_PIECEWISE and unpatched PIECEWISE on
# document 0 (b's restore records are the "on" side)
has n && run n_fap_all 1 "$H" --spec ngram --draft-tokens 3 --cudagraph FULL_AND_PIECEWISE \
  --patches all --seed 0 --isolation restore --poison off
has n && run n_pw_none 1 "$H" --spec ngram --draft-tokens 3 --cudagraph PIECEWISE \
  --patches none --seed 0 --isolation restore --poison off
has c1 && run c1 3 "$H" --spec ngram --draft-tokens 2,4 --cudagraph FULL_AND_PIECEWISE \
  --patches none --seed 0,1 --isolation auto --auto-sample 1
if has c2; then
  run c2_ngram 3 "$H" --spec ngram --draft-tokens 3,5 --cudagraph FULL_AND_PIECEWISE \
    --patches none --seed 0,1 --isolation auto --auto-sample 1
  run c2_mtp 3 "$H" --spec mtp --draft-tokens 1,3 --cudagraph FULL_AND_PIECEWISE \
    --patches none --seed 0,1 --isolation auto --auto-sample 1
  run c2_dflash 2 "$H" "${DFLASH[@]}" --cudagraph FULL_AND_PIECEWISE --patches none \
    --seed 0,1 --isolation auto --auto-sample 1
fi
if has c3; then
  run c3_ngram 5 "$H" --spec ngram --draft-tokens 2,3,4,5 --cudagraph FULL_AND_PIECEWISE \
    --patches all --seed 0,1 --isolation auto --auto-sample 1
  run c3_mtp 2 "$H" --spec mtp --draft-tokens 3 --cudagraph FULL_AND_PIECEWISE --patches all \
    --seed 0,1 --isolation auto --auto-sample 1
  run c3_dflash 2 "$H" "${DFLASH[@]}" --cudagraph FULL_AND_PIECEWISE --patches all \
    --seed 0,1 --isolation auto --auto-sample 1
fi
if has a; then
  echo "a: restore_probe" >> "$W/commands.txt"
  timeout --signal=INT -k 25 "$H" python3 benchmarks/restore_probe.py --out "$W/probe" \
    --residue 3 --others 2,4 "${PROBE_GPU[@]}" -- "${BASE[@]}" --ctx huge --context 1200 \
    --spec ngram --draft-tokens 2 --cudagraph FULL_AND_PIECEWISE --patches none \
    > "$W/probe.stdout.txt" 2> "$W/probe.stderr.txt"
  echo "a rc=$? $(el)s" >> "$W/timings.txt"
fi
LEFT=$(( H - $(el) ))   # (timeout 0 would mean no limit: p needs a real budget)
if has p && [ "$LEFT" -gt 60 ]; then   # sleep-mode fresh servers on the slot the probe leaves
  run p 2 "$LEFT" --spec ngram --draft-tokens 2,4 --cudagraph FULL_AND_PIECEWISE \
    --patches none --seed 0 --residues 2-6 --isolation fresh --engine-arg=--enable-sleep-mode \
    --launcher plain
fi
has p && [ "$LEFT" -le 60 ] && echo "p not run: ${LEFT}s left" >> "$W/timings.txt"
for i in "${!PIDS[@]}"; do wait "${PIDS[$i]}"; echo "${NAMES[$i]} rc=$? $(el)s" >> "$W/timings.txt"; done
[ "$ENGINE" = vllm ] && echo "vllm processes after the stages: $(pgrep -c -f 'vllm.entrypoints|engine.prefork')" >> "$W/timings.txt"
# -- what it shows: cell-by-cell agreement, and the per-point cost ---------------------------
{ for n in "${NAMES[@]}"; do
    f=$(ls "$W/$n"/*.jsonl 2>/dev/null | head -1); [ -n "$f" ] || continue
    if [ "$n" = p ]; then
      c=$(ls "$W/c1"/*.jsonl 2>/dev/null | head -1); [ -n "$c" ] || continue
      echo "== p: sleep-mode fresh (left) vs c1's plain fresh (right)"
      python3 benchmarks/compare_isolation.py "$f" --left fresh --vs "$c" --right fresh \
        --json "$W/compare-p.json"
    else
      echo "== $n: within the run"
      python3 benchmarks/compare_isolation.py "$f" --json "$W/compare-$n.json"
    fi
    echo "rc=$?"
  done
} > "$W/compare.txt" 2>&1
MACHINE="one H200 (vLLM 0.26.0, tiny hybrid, up to 13 servers side by side)"
[ "$ENGINE" = vllm ] || MACHINE="$(nproc)-core CPU, lab engine (stand-in run)"
python3 benchmarks/isolation_cost.py $(ls "$W"/*/*.jsonl 2>/dev/null | grep -v /probe/) \
  --machine "$MACHINE" -o "$W/cost.md" > "$W/cost.stdout.txt" 2>&1
[ -n "$MON" ] && kill "$MON" 2>/dev/null
echo "end $(el)s" >> "$W/timings.txt"
dev_pack restore
ls -la "$OUT"; cat "$W/timings.txt" "$W/compare.txt" "$W/cost.md" "$W/probe/probe.md" 2>/dev/null
for n in "${NAMES[@]}"; do echo "== $n"; tail -c 800 "$W/$n.stderr.txt"; done
