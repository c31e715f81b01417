#!/bin/bash
# SGLang 0.5.12 on the lent GPU, in two calls on one held machine (docs/sglang.md, "The
# device bundle"; the archives built as it says, copied under the ignored .gpu/sglang/):
#   call 1, carry .gpu/sglang/py:      bash engine/tinymodel/scripts/sglang_calls.sh unpack
#   call 2, carry .gpu/sglang/kernel:  bash engine/tinymodel/scripts/sglang_calls.sh smoke [LIMIT_S]
# "smoke" proves the stack before any sweep: the imports, one server on the committed hybrid
# (triton attention, PyTorch sampling: no FA3, no FlashInfer), its /server_info and a cached
# second send, then a three-residue sweep under what is left of LIMIT_S (default 540).
# Not yet run on a GPU (written 2026-12-06 from SGLang's source, for the lead's device call).
R=$(cd "$(dirname "$0")/../../.." && pwd); S=${S:-$R}
source "$R/engine/tinymodel/scripts/device_lib.sh"
MODEL=$R/engine/tinymodel/weights/hybrid
# the flags the smoke server and the sweep share (the sweep adds its own as --engine-arg)
SGL_ARGS=(--attention-backend=triton --sampling-backend=pytorch --mem-fraction-static=0.3)

sgl_env() {
  export PYTHONPATH=/tmp/site:$S HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PYTHONUNBUFFERED=1
}

sgl_unpack() {   # $1: the archive, carried in this call
  mkdir -p /tmp/site && tar -xJf "$1" -C /tmp/site && echo "unpacked $(basename "$1") $(el)s"
}

sgl_server() {   # $1: port, $2: log; the server in its own session (SGL_PID), killed by group
  setsid python3 -m sglang.launch_server --model-path "$MODEL" --host 127.0.0.1 --port "$1" \
    "${SGL_ARGS[@]}" --page-size 64 --mamba-scheduler-strategy extra_buffer \
    --speculative-algorithm NGRAM --speculative-num-draft-tokens 4 --enable-cache-report \
    --enable-metrics --random-seed 0 > "$2" 2>&1 &
  SGL_PID=$!
}

sgl_smoke() {   # $1: the work folder
  local w=$1 port=30123 t
  python3 -c "import sglang.launch_server, sgl_kernel; print('sgl_kernel', sgl_kernel.__version__)" \
    > "$w/imports.txt" 2>&1 || return 1
  sgl_server $port "$w/server.log"
  for t in $(seq 1 300); do
    curl -sf "127.0.0.1:$port/health" > /dev/null && break
    kill -0 $SGL_PID 2> /dev/null || break
    sleep 1
  done
  echo "health after ${t}s (call at $(el)s)" >> "$w/timings.txt"
  curl -s "127.0.0.1:$port/server_info" > "$w/server_info.json"
  local body   # a prompt of several pages (64 tokens each): the second send hits them
  body=$(python3 -c "import json,sys; print(json.dumps({'model': sys.argv[1], 'max_tokens': 16,
    'temperature': 0, 'messages': [{'role': 'user', 'content': 'Copy the first line.\n\n'
    + '\n'.join(f'line {i} of the document' for i in range(60))}]}))" "$MODEL")
  for t in 1 2; do   # the second send must report cached_tokens
    curl -s "127.0.0.1:$port/v1/chat/completions" -H 'Content-Type: application/json' \
      -d "$body" >> "$w/chat.jsonl"; echo >> "$w/chat.jsonl"
  done
  kill -- -$SGL_PID 2> /dev/null; wait $SGL_PID 2> /dev/null
  grep -q cached_tokens "$w/chat.jsonl"
}

case "$1" in
  unpack)
    sgl_unpack "$R/.gpu/sglang/py/site_py.tar.xz"
    nice python3 -m compileall -q -j 8 /tmp/site > /dev/null 2>&1; echo "compileall $(el)s" ;;
  smoke)
    LIMIT=${2:-540}; : "${OUT:=/tmp/out}"; W=$DEV_WORK/sglang; rm -rf "$W"; mkdir -p "$W" "$OUT"
    sgl_unpack "$R/.gpu/sglang/kernel/site_kernel.tar.xz" >> "$W/timings.txt"
    sgl_env; dev_env_txt "$W/env.txt"; dev_monitor "$W/monitor.txt"
    if sgl_smoke "$W"; then
      timeout --signal=INT $((LIMIT - $(el) - 30)) python3 -m harness --engine sglang \
        --model "$MODEL" --geometry hybrid --spec ngram --ctx huge --block-size 64 \
        --prefix-match-unit 64 --residues 3-5 --gpus 0 --no-progress \
        "${SGL_ARGS[@]/#/--engine-arg=}" \
        --out "$W/results" --reports-dir "$W/reports" > "$W/sweep.txt" 2>&1
      echo "sweep rc=$? $(el)s" >> "$W/timings.txt"
    else
      echo "smoke failed $(el)s" >> "$W/timings.txt"
    fi
    kill $MON 2> /dev/null; dev_pack sglang ;;
  *) echo "usage: sglang_calls.sh unpack | smoke [LIMIT_S]" >&2; exit 2 ;;
esac
