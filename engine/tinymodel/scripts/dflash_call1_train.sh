#!/bin/bash
# Issue 18, second DFlash attempt, device call 1 (carry .gpu/bundle/a and .gpu/src): unpack
# vLLM bundle part a into /tmp/site in the background and, on the GPU, train a DFlash
# drafter of LAYERS layers (default 3) against the frozen committed hybrid.
# Why 3: vLLM 0.26.0 refused the 4-layer drafter at KV-cache set-up ("All drafting layers
# should belong to the same kv cache group"): 2 target attention layers + 4 drafter layers =
# 6 = 1.5 x the 4 GDN layers, so `_get_kv_cache_groups_uniform_page_size` cut the attention
# layers into two groups of 4. With 3, 5 < 6: one attention group of 5 (docs/gpu-notes.md).
# The drafter stays in /tmp/tiny/dflash for the sweep call; $OUT gets dflash.tar, logs.tar.
# Usage: SRC=.gpu/src bash engine/tinymodel/scripts/dflash_call1_train.sh [CAP_S] [LAYERS]
CAP=${1:-150}; LAYERS=${2:-3}
R=$PWD; S=$(cd "${SRC:-$R}" && pwd) && cd "$S" || exit 3
source "$S/engine/tinymodel/scripts/device_lib.sh"
# the target: the committed weights as the device's tree holds them (weights/hybrid)
dev_train_prologue
python3 -m engine.tinymodel train-dflash --target /tmp/tiny/target --out /tmp/tiny/dflash \
  --layers "$LAYERS" --time-cap "$CAP" --workers 8 > "$L/stdout_dflash.txt" 2>&1
echo "dflash rc=$? $(el)s" >> "$L/timings.txt"
wait $BG; echo "end $(el)s" >> "$L/timings.txt"
[ -f /tmp/tiny/dflash/config.json ] && tar -cf "$OUT/dflash.tar" -C /tmp/tiny dflash
tar -cf "$OUT/logs.tar" -C "$OUT" logs && rm -rf "$L"
ls -la "$OUT"; tar -xOf "$OUT/logs.tar" logs/timings.txt
tar -xOf "$OUT/logs.tar" logs/stdout_dflash.txt | tail -6 | cut -c1-3000
