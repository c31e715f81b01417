#!/bin/bash
# Issue 18, device calls 3 and 4, back to back on one held machine (the MTP head and the
# DFlash drafter were left in /tmp/tiny by call 1, bundle half b1 in /tmp/parts by call 2).
#   WAVE=reset (call 3; carry .gpu/bundle/b2 and .gpu/src): complete /tmp/site with vLLM's
#     _C, put the checkpoints where the README's command names them
#     (engine/tinymodel/weights/{hybrid,dflash} under SRC), and run at once on GPU 0:
#     - mtp, k = 3 and k = 1 (one harness each): reset, all 128 residues,
#       FULL_AND_PIECEWISE,PIECEWISE x patches none,all (4 slots: one server per configuration);
#     - dflash2, k = 7, the same matrix (4 servers), when the drafter exists;
#     - ngram k = 4, fresh, residue 5, FULL_AND_PIECEWISE unpatched (the earlier
#       "k = 4 clean" came from a reset server).
#   WAVE=fresh (call 4; carry .gpu/src): fresh servers, one per point, for the rule's
#     residue (1 + k) of every configuration and every residue that was not ok in the
#     reset wave, with VLLM_LOGGING_LEVEL=DEBUG so the runner logs each batch's size and
#     graph mode (which prefill chunk replayed the FULL graph). Compile caches are warm.
# Every harness runs under `timeout --signal=INT` (stops gracefully, keeps its records).
# Usage: WAVE=reset|fresh SRC=.gpu/src bash engine/tinymodel/scripts/spec_sweep.sh [LIMIT_S]
LIMIT=${1:-590}; : "${WAVE:?WAVE=reset or WAVE=fresh}"
R=$PWD; S=$(cd "${SRC:-$R}" && pwd) && cd "$S" || exit 3
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
left() { echo $(( LIMIT - 40 - $(el) )); }
: "${OUT:=/tmp/out}"; W=/tmp/work/$WAVE; rm -rf "$W"; mkdir -p "$W" "$OUT"
M=engine/tinymodel/weights
if [ "$WAVE" = reset ]; then
mkdir -p /tmp/parts && cp "$R"/.gpu/bundle/b2/site_b.tar.xz.part* /tmp/parts/ &&
  cat /tmp/parts/site_b.tar.xz.part* | tar -xJ -C /tmp/site && echo "unpack_b $(el)s" >> "$W/timings.txt"
fi
mkdir -p "$M" && rm -rf "$M/hybrid" "$M/dflash" && cp -r /tmp/tiny/hybrid "$M/hybrid" &&
  echo "model: $M/hybrid ($(ls "$M/hybrid" | tr '\n' ' '))" >> "$W/timings.txt"
DRAFT=; if [ -f /tmp/tiny/dflash/config.json ]; then cp -r /tmp/tiny/dflash "$M/dflash"; DRAFT=$M/dflash; fi
echo "drafter: ${DRAFT:-none}" >> "$W/timings.txt"
cp "$S/PROVENANCE" "$W/" 2>/dev/null
export PYTHONPATH=/tmp/site:$S HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 VLLM_NO_USAGE_STATS=1 PYTHONUNBUFFERED=1
( while :; do echo "t=$(el) $(nvidia-smi --query-gpu=memory.used,utilization.gpu --format=csv,noheader) load $(cut -d' ' -f1-3 /proc/loadavg)"; sleep 10; done ) > "$W/monitor.txt" 2>&1 &
MON=$!
COMMON=(--engine vllm --model "$M/hybrid" --geometry hybrid --ctx huge
        --engine-arg=--gpu-memory-utilization=0.07 --context 1200 --no-progress)
MATRIX=(--cudagraph FULL_AND_PIECEWISE,PIECEWISE --patches none,all)
PIDS=(); NAMES=()
run() {  # NAME TIMEOUT_S ARGS... : one harness process in the background
  local n=$1 t=$2; shift 2
  echo "$n: sweep $*" >> "$W/commands.txt"
  timeout --signal=INT -k 25 "$t" python3 -m harness "$@" --out "$W/$n" --reports-dir "$W/$n" \
    > "$W/$n.stdout.txt" 2>&1 &
  PIDS+=($!); NAMES+=("$n")
}
wait_all() {
  for i in "${!PIDS[@]}"; do wait "${PIDS[$i]}"; echo "${NAMES[$i]} rc=$? $(el)s" >> "$W/timings.txt"; done
  PIDS=(); NAMES=()
}
if [ "$WAVE" = reset ]; then
W1=$(left)
for k in 3 1; do
  run "reset_mtp_k$k" "$W1" "${COMMON[@]}" --spec mtp --draft-tokens "$k" "${MATRIX[@]}" --isolation reset \
    --residues all --gpus 0,0,0,0 --boot-timeout $(( W1 - 40 ))
done
[ -n "$DRAFT" ] && run reset_dflash "$W1" "${COMMON[@]}" --spec dflash2 --draft-model "$DRAFT" "${MATRIX[@]}" \
  --isolation reset --residues all --gpus 0,0,0,0 --boot-timeout $(( W1 - 40 ))
run fresh_ngram_k4 "$W1" "${COMMON[@]}" --spec ngram --draft-tokens 4 \
  --cudagraph FULL_AND_PIECEWISE --patches none --isolation fresh --residues 5 --gpus 0 \
  --boot-timeout $(( W1 - 40 ))
else
# Residues to send to fresh servers: the rule's 1 + k, plus every residue not ok in wave 1.
not_ok() {  # RESULTS_DIR RULE_RESIDUE -> comma list
  python3 - "$@" <<'PY'
import gzip, json, pathlib, sys
rs = {int(sys.argv[2])}
for f in pathlib.Path(sys.argv[1]).glob("*.jsonl*"):
    op = gzip.open if f.suffix == ".gz" else open
    with op(f, "rt") as fh:
        for line in fh:
            r = json.loads(line)
            if r.get("verdict") != "ok" and r.get("residue") is not None:
                rs.add(int(r["residue"]))
print(",".join(str(r) for r in sorted(rs)[:6]))
PY
}
export VLLM_LOGGING_LEVEL=DEBUG
W2=$(left)
slots() { local n; n=$(( 4 * $(echo "$1" | tr ',' '\n' | wc -l) )); [ "$n" -gt 12 ] && n=12; yes 0 | head -n "$n" | paste -sd, -; }
R3=$(not_ok /tmp/work/reset/reset_mtp_k3 4); R1=$(not_ok /tmp/work/reset/reset_mtp_k1 2); R7=$(not_ok /tmp/work/reset/reset_dflash 8)
echo "fresh residues: mtp k3 $R3, mtp k1 $R1, dflash $R7" >> "$W/timings.txt"
run fresh_mtp_k3 "$W2" "${COMMON[@]}" --spec mtp --draft-tokens 3 "${MATRIX[@]}" --isolation fresh \
  --residues "$R3" --gpus "$(slots "$R3")" --boot-timeout $(( W2 - 30 ))
run fresh_mtp_k1 "$W2" "${COMMON[@]}" --spec mtp --draft-tokens 1 "${MATRIX[@]}" --isolation fresh \
  --residues "$R1" --gpus "$(slots "$R1")" --boot-timeout $(( W2 - 30 ))
[ -n "$DRAFT" ] && [ -d /tmp/work/reset/reset_dflash ] && run fresh_dflash "$W2" "${COMMON[@]}" --spec dflash2 --draft-model "$DRAFT" "${MATRIX[@]}" \
  --isolation fresh --residues "$R7" --gpus "$(slots "$R7")" --boot-timeout $(( W2 - 30 ))
fi
wait_all
kill "$MON" 2>/dev/null
echo "end $(el)s" >> "$W/timings.txt"
# DEBUG logs are large: keep them compressed inside the archive.
find "$W" -name '*.log' -size +1M -exec gzip -9 {} \;
tar -czf "$OUT/spec_$WAVE.tgz" -C /tmp/work "$WAVE"
SZ=$(stat -c %s "$OUT/spec_$WAVE.tgz")
if [ "$SZ" -gt 16000000 ]; then split -b 15000000 -d "$OUT/spec_$WAVE.tgz" "$OUT/spec_$WAVE.tgz.part" && rm "$OUT/spec_$WAVE.tgz"; fi
ls -la "$OUT"; cat "$W/timings.txt"; tail -3 "$W/monitor.txt"
for f in "$W"/*.stdout.txt; do echo "== $f"; tail -8 "$f" | cut -c1-400; done
