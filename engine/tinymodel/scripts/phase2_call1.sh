#!/bin/bash
# Device training call (phases 2 and 3; carry .gpu/bundle/a and .gpu/extra): unpack bundle part a into
# /tmp/site in the background (then byte-compile it and check, on the device's python, that
# the harness imports and the plugin's gates pass on vLLM 0.26.0's source), train the hybrid,
# copy its served layout to /tmp/tiny/hybrid for call 2, return ONE weights tar + ONE logs tar.
# Usage: bash engine/tinymodel/scripts/phase2_call1.sh [HYBRID_CAP_S]
#   env INIT=DIR (in the tree or carried): go on training that served checkpoint at the last
#   curriculum stage (phase 3: INIT=.gpu/weights/hybrid-phase2; now engine/tinymodel/weights/hybrid)
#   env HSEEDS=0,1,...: document seeds (sweep --seed) the final check tries on the harness plans
#   env TRAIN_EXTRA="...": more `python -m engine.tinymodel train` arguments
HCAP=${1:-320}
# SRC: a committed snapshot of harness/ + engine/ (e.g. .gpu/src from `git archive`), so the
# device never runs a working tree that others are editing; default: the repository itself.
R=$PWD; S=$(cd "${SRC:-$R}" && pwd) && cd "$S" || exit 3
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
: "${OUT:=/tmp/out}"; L="$OUT/logs"; mkdir -p "$L" /tmp/site /tmp/tiny
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PYTHONUNBUFFERED=1
{ cat "$S/PROVENANCE" 2>/dev/null; nvidia-smi --query-gpu=name,driver_version,memory.used,memory.total --format=csv; nproc; free -g
  python3 -c "import sys,torch,transformers,tokenizers;print(sys.version);print('torch',torch.__version__,torch.version.cuda);print('transformers',transformers.__version__,'tokenizers',tokenizers.__version__)"
} > "$L/env.txt" 2>&1
(
  tar -xJf "$R/.gpu/bundle/a/site_a.tar.xz" -C /tmp/site && echo "unpack_a $(el)s" >> "$L/timings.txt"
  { echo "== imports (device python, PYTHONPATH=/tmp/site:repo)"
    PYTHONPATH=/tmp/site:$S python3 - <<'PY'
import importlib
for m in ("harness.command.cli", "harness.report", "harness.serve.client", "harness.residue_sweep",
          "engine.vllm", "engine.vllm.launch", "engine.vllm.effective", "engine.vllm.patches",
          "pandas", "tabulate", "jinja2", "tqdm", "prometheus_client", "httpx", "psutil",
          "tokenizers", "fastapi", "uvicorn", "openai"):
    try:
        mod = importlib.import_module(m)
        print("ok ", m, getattr(mod, "__version__", ""))
    except Exception as e:
        print("ERR", m, type(e).__name__, e)
try:
    import pandas as pd
    print(pd.DataFrame({"a": [1]}).to_markdown(index=False, tablefmt="github"))
except Exception as e:
    print("ERR to_markdown", e)
PY
    echo "== plugin gates against vLLM 0.26.0 source (/tmp/site)"
    PYTHONPATH=$S python3 -m engine.vllm.patches --check-source /tmp/site
  } > "$L/device_checks.txt" 2>&1
  echo "checks $(el)s" >> "$L/timings.txt"
  nice python3 -m compileall -q -j 4 /tmp/site > /dev/null 2>&1; echo "compileall_done $(el)s" >> "$L/timings.txt"
) &
BG=$!
INIT_ARGS=(); [ -n "$INIT" ] && INIT_ARGS=(--init "$R/$INIT" --start-stage 4)
# A second GPU (nvidia-h200-x2) trains the dense control model from scratch at the same time.
NGPU=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU'); DPID=
if [ "${NGPU:-1}" -ge 2 ]; then
  CUDA_VISIBLE_DEVICES=1 python3 -m engine.tinymodel train --variant dense --out "$OUT/dense" \
    --time-cap "$HCAP" --workers 8 --n 256 --harness-seeds "${HSEEDS:-0}" \
    > "$L/stdout_dense.txt" 2>&1 &
  DPID=$!
fi
# shellcheck disable=SC2086
CUDA_VISIBLE_DEVICES=0 python3 -m engine.tinymodel train --variant hybrid --out "$OUT/hybrid" \
  --time-cap "$HCAP" --workers 8 --n 256 --harness-seeds "${HSEEDS:-0}" "${INIT_ARGS[@]}" \
  $TRAIN_EXTRA > "$L/stdout_hybrid.txt" 2>&1
echo "hybrid rc=$? $(el)s" >> "$L/timings.txt"
rm -rf /tmp/tiny/hybrid; cp -r "$OUT/hybrid" /tmp/tiny/ && echo "copied to /tmp/tiny/hybrid" >> "$L/timings.txt"
if [ -n "$DPID" ]; then
  wait "$DPID"; echo "dense rc=$? $(el)s" >> "$L/timings.txt"
  rm -rf /tmp/tiny/dense; cp -r "$OUT/dense" /tmp/tiny/ && echo "copied to /tmp/tiny/dense" >> "$L/timings.txt"
fi
# the plan call 2 will run, printed by the device's python (needs tokenizer + template in the layout)
PYTHONPATH=/tmp/site:$S python3 -m harness --engine vllm --model /tmp/tiny/hybrid --geometry hybrid \
  --spec ngram --ctx huge --engine-arg=--language-model-only --engine-arg=--gpu-memory-utilization=0.08 \
  --cudagraph FULL_AND_PIECEWISE --patches none --isolation reset --residues all --context 1200 \
  --gpus 0 --out /tmp/dry --dry-run > "$L/dry_run.txt" 2>&1
wait $BG; echo "end $(el)s" >> "$L/timings.txt"
for v in hybrid dense; do [ -d "$OUT/$v" ] && tar -cf "$OUT/$v.tar" -C "$OUT" "$v" && rm -rf "${OUT:?}/$v"; done
tar -cf "$OUT/logs.tar" -C "$OUT" logs && rm -rf "$L"
ls -la "$OUT"; tar -xOf "$OUT/logs.tar" logs/timings.txt logs/device_checks.txt
for v in hybrid dense; do
  tar -xOf "$OUT/logs.tar" "logs/stdout_$v.txt" 2>/dev/null | grep -E 'stage|cap|solved|"variant"' | cut -c1-2400
done
