#!/bin/bash
# Device sweeps call (phases 2 and 3; carry .gpu/bundle/b or b2, and .gpu/extra), issued right after
# phase2_call1.sh on the same held machine: complete /tmp/site with vLLM's _C, then run the
# harness itself (`python3 -m harness --engine vllm`) on /tmp/tiny/hybrid:
#   - reset isolation, all 128 residues, one harness process per configuration
#     (FULL_AND_PIECEWISE / PIECEWISE x patches none / all), --gpus 0 each: one server each.
#     (Written when one process with --gpus 0,0,0,0 and the 4-configuration matrix booted
#     configurations again on slots that had finished theirs; since 656b72d a slot boots a
#     second server for a configuration only where that finishes it sooner, so one process
#     with --cudagraph FULL_AND_PIECEWISE,PIECEWISE --patches none,all --gpus 0,0,0,0 now
#     boots four servers. The phase-3 runs still used one process per configuration.)
#   - fresh isolation, residues 3,4,5,60 (k, k+1, k+2 for ngram k=3, plus 60), FULL_AND_PIECEWISE,
#     patches none,all, 8 slots on GPU 0: all 8 servers boot in one wave.
#   - with a second GPU: the same fresh run under PIECEWISE, and the dense model (reset, all
#     residues, FULL_AND_PIECEWISE, patches none / all), on GPU 1.
# All servers (12 on one GPU, 22 on two) boot at once. Each harness runs under `timeout --signal=INT`, so it stops
# gracefully (kills its servers, keeps finished records, writes its manifest) before LIMIT.
# Usage: bash engine/tinymodel/scripts/phase2_call2.sh [LIMIT_S]   (the run call's timeout_s)
LIMIT=${1:-600}; T=$(( LIMIT - 75 )); BT=$(( T - 60 ))
R=$PWD; S=$(cd "${SRC:-$R}" && pwd) && cd "$S" || exit 3   # SRC: committed snapshot, as in phase2_call1.sh
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
: "${OUT:=/tmp/out}"; W=/tmp/work; rm -rf "$W"; mkdir -p "$W" "$OUT"
ls /tmp/site/vllm > /dev/null 2>&1 || echo "no /tmp/site/vllm: machine was not kept" >> "$W/timings.txt"
# Bundle part b whole (.gpu/bundle/b), or, once the committed weights make the tree too big
# to travel with it (64 MiB a call), in two halves: b1 stashed by an earlier call
# (`mkdir -p /tmp/parts && cp .gpu/bundle/b1/* /tmp/parts/`), b2 carried by this one.
if [ -f "$R/.gpu/bundle/b/site_b.tar.xz" ]; then
  tar -xJf "$R/.gpu/bundle/b/site_b.tar.xz" -C /tmp/site
else
  mkdir -p /tmp/parts && cp "$R"/.gpu/bundle/b2/site_b.tar.xz.part* /tmp/parts/ &&
    cat /tmp/parts/site_b.tar.xz.part* | tar -xJ -C /tmp/site
fi && echo "unpack_b $(el)s" >> "$W/timings.txt"
cp "$S/PROVENANCE" "$W/" 2>/dev/null
python3 -c "from engine.tinymodel.layout import raise_served_max_len as r; r('/tmp/tiny/hybrid')"
export PYTHONPATH=/tmp/site:$S HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 VLLM_NO_USAGE_STATS=1 PYTHONUNBUFFERED=1
python3 -c "import tabulate" 2>/dev/null || export PYTHONPATH=$PYTHONPATH:$(ls "$R"/.gpu/extra/tabulate-*.whl | head -1)
echo "sweep window T=${T}s boot-timeout ${BT}s PYTHONPATH=$PYTHONPATH" >> "$W/timings.txt"
( while :; do echo "t=$(el) $(nvidia-smi --query-gpu=memory.used,utilization.gpu --format=csv,noheader) load $(cut -d' ' -f1-3 /proc/loadavg) vllm_procs $(pgrep -fc vllm.entrypoints)"; sleep 10; done ) > "$W/monitor.txt" 2>&1 &
MON=$!
# The document seed (sweep --seed): the first seed whose 128 harness plans the trained model
# reproduced exactly in its check (training.json: final_check_bf16.harness_seeds_exact), so a
# wrong answer is the server's doing, not the model's; 0 when none was (or env SEED=N).
exact_seed() {  # first exact document seed of the model in $1, else 0
  python3 -c "import json, sys; c = json.load(open(sys.argv[1] + '/training.json')).get('final_check_bf16', {}); print((c.get('harness_seeds_exact') or [0])[0])" "$1" 2>/dev/null || echo 0
}
: "${SEED:=$(exact_seed /tmp/tiny/hybrid)}"
echo "document seed $SEED" >> "$W/timings.txt"
COMMON=(--engine vllm --model /tmp/tiny/hybrid --geometry hybrid --spec ngram --ctx huge --seed "$SEED"
        --engine-arg=--language-model-only --engine-arg=--gpu-memory-utilization=0.08
        --context 1200 --boot-timeout "$BT" --no-progress)
PIDS=(); NAMES=()
for cg in FULL_AND_PIECEWISE PIECEWISE; do for p in none all; do
  n="reset_${cg}_${p}"
  timeout --signal=INT -k 25 "$T" python3 -m harness "${COMMON[@]}" --cudagraph "$cg" --patches "$p" \
    --isolation reset --residues all --gpus 0 --out "$W/$n" --reports-dir "$W/$n/reports" \
    > "$W/$n.stdout.txt" 2>&1 &
  PIDS+=($!); NAMES+=("$n")
done; done
n=fresh_FULL_AND_PIECEWISE
timeout --signal=INT -k 25 "$T" python3 -m harness "${COMMON[@]}" --cudagraph FULL_AND_PIECEWISE \
  --patches none,all --isolation fresh --residues 3,4,5,60 --gpus 0,0,0,0,0,0,0,0 \
  --out "$W/$n" --reports-dir "$W/$n/reports" > "$W/$n.stdout.txt" 2>&1 &
PIDS+=($!); NAMES+=("$n")
# A second GPU (nvidia-h200-x2): the fresh run under PIECEWISE (so reset and fresh can be
# compared cell by cell in both graph modes), and the dense control model, reset, FULL.
if [ "$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')" -ge 2 ]; then
  n=fresh_PIECEWISE
  timeout --signal=INT -k 25 "$T" python3 -m harness "${COMMON[@]}" --cudagraph PIECEWISE \
    --patches none,all --isolation fresh --residues 3,4,5,60 --gpus 1,1,1,1,1,1,1,1 \
    --out "$W/$n" --reports-dir "$W/$n/reports" > "$W/$n.stdout.txt" 2>&1 &
  PIDS+=($!); NAMES+=("$n")
  if [ -f /tmp/tiny/dense/config.json ]; then
    python3 -c "from engine.tinymodel.layout import raise_served_max_len as r; r('/tmp/tiny/dense')"
    DSEED=$(exact_seed /tmp/tiny/dense)
    echo "dense document seed $DSEED" >> "$W/timings.txt"
    for p in none all; do
      n="dense_reset_FULL_AND_PIECEWISE_${p}"
      timeout --signal=INT -k 25 "$T" python3 -m harness --engine vllm --model /tmp/tiny/dense \
        --geometry dense --spec ngram --ctx huge --seed "$DSEED" \
        --engine-arg=--gpu-memory-utilization=0.08 --context 1200 --boot-timeout "$BT" --no-progress \
        --cudagraph FULL_AND_PIECEWISE --patches "$p" --isolation reset --residues all --gpus 1 \
        --out "$W/$n" --reports-dir "$W/$n/reports" > "$W/$n.stdout.txt" 2>&1 &
      PIDS+=($!); NAMES+=("$n")
    done
  fi
fi
for i in "${!PIDS[@]}"; do wait "${PIDS[$i]}"; echo "${NAMES[$i]} rc=$? $(el)s" >> "$W/timings.txt"; done
kill "$MON" 2>/dev/null
echo "vllm processes left: $(pgrep -fc vllm.entrypoints)" >> "$W/timings.txt"
echo "end $(el)s" >> "$W/timings.txt"
tar -czf "$OUT/phase2_results.tgz" -C /tmp work
SZ=$(stat -c %s "$OUT/phase2_results.tgz")
if [ "$SZ" -gt 16000000 ]; then split -b 15000000 -d "$OUT/phase2_results.tgz" "$OUT/phase2_results.tgz.part" && rm "$OUT/phase2_results.tgz"; fi
ls -la "$OUT"; cat "$W/timings.txt"; tail -3 "$W/monitor.txt"
for f in "$W"/*.stdout.txt; do echo "== $f"; tail -12 "$f"; done
