#!/bin/bash
# Issue 18, device call 1 (carry .gpu/bundle/a and .gpu/src): unpack vLLM bundle part a into
# /tmp/site in the background, and on the one GPU at once train
#   - the MTP head on the frozen committed hybrid (python -m engine.tinymodel mtp-train),
#     written into /tmp/tiny/hybrid (a copy of the target + mtp.safetensors), and
#   - the DFlash drafter (python -m engine.tinymodel train-dflash), into /tmp/tiny/dflash,
#     when SRC has that verb.
# /tmp persists while the machine is held, so call 3 (spec_call3_sweep.sh) serves both from
# there. $OUT gets mtp.tar, dflash.tar and logs.tar (at most 8 files come back).
# Usage: SRC=.gpu/src bash engine/tinymodel/scripts/spec_call1_train.sh [MTP_CAP_S] [DFLASH_CAP_S]
MCAP=${1:-150}; DCAP=${2:-150}
R=$PWD; S=$(cd "${SRC:-$R}" && pwd) && cd "$S" || exit 3
source "$S/engine/tinymodel/scripts/device_lib.sh"
# the target: the committed weights as the device's tree holds them (weights/hybrid)
dev_train_prologue
DPID=
if python3 -m engine.tinymodel train-dflash --help > /dev/null 2>&1; then
  python3 -m engine.tinymodel train-dflash --target /tmp/tiny/target --out /tmp/tiny/dflash \
    --time-cap "$DCAP" --workers 6 > "$L/stdout_dflash.txt" 2>&1 &
  DPID=$!
else
  echo "no train-dflash verb in SRC: DFlash not trained" >> "$L/timings.txt"
fi
python3 -m engine.tinymodel mtp-train --target /tmp/tiny/target --out /tmp/tiny/hybrid \
  --time-cap "$MCAP" > "$L/stdout_mtp.txt" 2>&1
echo "mtp rc=$? $(el)s" >> "$L/timings.txt"
python3 -m engine.tinymodel mtp-check /tmp/tiny/hybrid --residues 0-0 > "$L/mtp_layout_check.txt" 2>&1
echo "mtp layout check rc=$? $(el)s" >> "$L/timings.txt"
if [ -n "$DPID" ]; then wait "$DPID"; echo "dflash rc=$? $(el)s" >> "$L/timings.txt"; fi
wait $BG; echo "end $(el)s" >> "$L/timings.txt"
( cd /tmp/tiny/hybrid && tar -cf "$OUT/mtp.tar" mtp.safetensors config.json training_mtp.json )
[ -d /tmp/tiny/dflash ] && tar -cf "$OUT/dflash.tar" -C /tmp/tiny dflash
tar -cf "$OUT/logs.tar" -C "$OUT" logs && rm -rf "$L"
ls -la "$OUT"; tar -xOf "$OUT/logs.tar" logs/timings.txt
tar -xOf "$OUT/logs.tar" logs/stdout_mtp.txt | tail -4 | cut -c1-3000
tar -xOf "$OUT/logs.tar" logs/stdout_dflash.txt 2>/dev/null | tail -4 | cut -c1-3000
