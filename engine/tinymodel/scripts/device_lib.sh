#!/bin/bash
# Shared steps of the device scripts (sourced, not run): the device's environment report,
# unpacking the vLLM bundle (docs/gpu-notes.md, "How to rerun on the device"), a GPU
# monitor, and packing a work folder into $OUT within the limits of what comes back
# (at most 8 files of 16 MiB). Sourcing it starts the call's clock: el() is the seconds since.
T0=$(date +%s)
el() { echo $(( $(date +%s) - T0 )); }
# DEV_WORK: the folder each call's work folder goes under (default /tmp/work, the device's);
# a test on a shared box gives its own, so two suites side by side do not empty each other's.
: "${DEV_WORK:=/tmp/work}"

# dev_vllm_env: the environment vLLM 0.26.0 ran in on the H200 (docs/gpu-notes.md), with
# the bundle and the code snapshot $S on the path.
dev_vllm_env() {
  export PYTHONPATH=/tmp/site:$S HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 VLLM_NO_USAGE_STATS=1 \
    VLLM_USE_FLASHINFER_SAMPLER=0 PYTHONUNBUFFERED=1
}

# dev_train_prologue: a training call's start: $L for logs, the environment report, bundle
# part a unpacking in the background, and the frozen target copied to /tmp/tiny/target.
dev_train_prologue() {
  : "${OUT:=/tmp/out}"; L="$OUT/logs"; mkdir -p "$L" /tmp/site /tmp/tiny
  export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PYTHONUNBUFFERED=1
  dev_env_txt "$L/env.txt"
  dev_unpack_a "$L/timings.txt"
  rm -rf /tmp/tiny/target /tmp/tiny/hybrid /tmp/tiny/dflash
  cp -r "$R/engine/tinymodel/weights/hybrid" /tmp/tiny/target && echo "target copied $(el)s" >> "$L/timings.txt"
}

# dev_env_txt FILE: the machine, GPU, python, torch and transformers, and the code's provenance.
dev_env_txt() {
  { cat "${S:-.}/PROVENANCE" 2>/dev/null
    nvidia-smi --query-gpu=name,driver_version,memory.used,memory.total --format=csv; nproc; free -g
    python3 -c "import sys,torch,transformers;print(sys.version);print('torch',torch.__version__,torch.version.cuda);print('transformers',transformers.__version__)"
  } > "$1" 2>&1
}

# dev_unpack_a TIMINGS: bundle part a into /tmp/site, then byte-compile it, in the
# background (BG is its pid); the tree's root is $R.
dev_unpack_a() {
  mkdir -p /tmp/site
  ( tar -xJf "$R/.gpu/bundle/a/site_a.tar.xz" -C /tmp/site && echo "unpack_a $(el)s" >> "$1"
    nice python3 -m compileall -q -j 4 /tmp/site > /dev/null 2>&1
    echo "compileall_done $(el)s" >> "$1" ) &
  BG=$!
}

# dev_unpack_b TIMINGS: vLLM's _C from half b1 (stashed in /tmp/parts by the call before)
# and half b2 (carried now) into /tmp/site.
dev_unpack_b() {
  cat /tmp/parts/site_b.tar.xz.part00 "$R"/.gpu/bundle/b2/site_b.tar.xz.part01 | tar -xJ -C /tmp/site \
    && echo "unpack_b $(el)s" >> "$1"
}

# dev_probe_start NAME: a probe call's start: W=$DEV_WORK/NAME emptied, $OUT made, vLLM's
# _C unpacked from the halves when missing, the environment, its report and the monitor.
dev_probe_start() {
  : "${OUT:=/tmp/out}"; W=$DEV_WORK/$1; rm -rf "$W"; mkdir -p "$W" "$OUT"
  if [ ! -f /tmp/site/vllm/_C_stable_libtorch.abi3.so ]; then
    if compgen -G "$R/.gpu/bundle/p/bundle.part*" > /dev/null; then dev_unpack_parts_b && echo "unpack_b $(el)s" >> "$W/timings.txt"
    else dev_unpack_b "$W/timings.txt"; fi
  fi
  dev_vllm_env
  dev_env_txt "$W/env.txt"
  dev_monitor "$W/monitor.txt"
}

# dev_monitor FILE: GPU memory and use and the load average every 10 s (MON is its pid).
dev_monitor() {
  ( while :; do echo "t=$(el) $(nvidia-smi --query-gpu=memory.used,utilization.gpu --format=csv,noheader) load $(cut -d' ' -f1-3 /proc/loadavg)"; sleep 10; done ) > "$1" 2>&1 &
  MON=$!
}

# dev_pack NAME: $DEV_WORK/NAME (its server logs gzipped) as $OUT/NAME.tgz, split in
# 15 MB parts when it is over the size that comes back; then dev_out_check.
dev_pack() {
  find "$DEV_WORK/$1" -name '*.log' -exec gzip -9 {} \;
  tar -czf "$OUT/$1.tgz" -C "$DEV_WORK" "$1"
  if [ "$(stat -c %s "$OUT/$1.tgz")" -gt 15500000 ]; then
    split -b 15000000 -d "$OUT/$1.tgz" "$OUT/$1.tgz.part" && rm "$OUT/$1.tgz"
  fi
  dev_out_check
}

# dev_out_check: a call returns at most DEV_OUT_MAX (8) files from $OUT, counted over every
# script the call runs (scripts run beside each other share $OUT); past that, files are
# dropped whole (2026-12-01: 9 files, the records' tgz lost). Says so on stdout, whose tail
# comes back, and returns 1. Keep each script's $OUT to a tgz and a summary.
dev_out_check() {
  local n; n=$(find "$OUT" -type f | wc -l)
  if [ "$n" -gt "${DEV_OUT_MAX:-8}" ]; then
    echo "WARNING: \$OUT holds $n files, only ${DEV_OUT_MAX:-8} come back:"; ls -la "$OUT"; return 1
  fi
}

# dev_summary DIR NAME...: one markdown file to put in $OUT beside DIR's tgz, so the verdicts
# come back even if the tgz does not: DIR/timings.txt, then per harness run NAME (its report
# DIR/NAME/*.md, its stderr DIR/NAME.stderr.txt) the report's headline, Result and rule
# lines and Load table, and, where a server failed to boot, the error lines of DIR/NAME's
# server logs (vLLM's last line only says "See root cause above"). Call it before dev_pack
# (which gzips the logs).
dev_summary() {
  local d=$1 n f; shift
  echo "# summary of $(basename "$d") (the full reports, records and logs are in its tgz)"; echo
  echo '```'; cat "$d/timings.txt" 2>/dev/null; echo '```'
  for n; do
    f=$(ls "$d/$n"/*.md 2>/dev/null | head -1)
    echo; echo "## $n"; echo
    if [ -z "$f" ]; then
      echo "no report; stderr tail:"; echo '```'; tail -c 1500 "$d/$n.stderr.txt" 2>/dev/null; echo '```'
      continue
    fi
    sed -n '1,/^## /p' "$f" | grep -v '^## '
    grep -E '^- \*\*(Result|Bug B rule)' "$f"
    sed -n '/^## Load/,/^## [^L]/p' "$f" | grep '^|'
    if grep -q boot-fail "$f"; then
      echo; echo "boot-fail: error lines of the server logs (count, line):"; echo '```'
      cat "$d/$n"/*.logs/*.log 2>/dev/null \
        | grep -E 'Error|error|raise |Exception|larger than|insufficient|not enough' \
        | grep -v 'Engine core initialization failed' | sed 's/pid=[0-9]*/pid=N/' \
        | sort | uniq -c | sort -rn | head -25 | cut -c1-400
      echo '```'
    fi
  done
}

# The bundle in carried pieces (docs/gpu-notes.md, "The bundle in pieces"):
# .gpu/bundle/p/bundle.part00.. are site_a.tar.xz and site_b.tar.xz end to end, split in
# 22 MB pieces, so each piece travels beside the 38 MB tree under the 64 MiB limit;
# .gpu/bundle/p/sizes says where part a ends. dev_stash_part N copies the carried piece to
# /tmp/parts; once pieces 0 and 1 are there, dev_unpack_parts_a untars part a into
# /tmp/site (byte-compiled in the background, setsid so it outlives the call);
# dev_unpack_parts_b, with the last piece carried, untars part b (vLLM's _C) from every piece.
dev_stash_part() {
  mkdir -p /tmp/parts && cp "$R/.gpu/bundle/p/bundle.part0$1" "$R/.gpu/bundle/p/sizes" /tmp/parts/
}
dev_unpack_parts_a() {
  local a; a=$(sed -n 1p /tmp/parts/sizes); mkdir -p /tmp/site
  cat /tmp/parts/bundle.part00 /tmp/parts/bundle.part01 | head -c "$a" | tar -xJ -C /tmp/site || return 1
  setsid nohup nice python3 -m compileall -q -j 8 /tmp/site > /dev/null 2>&1 < /dev/null &
}
dev_unpack_parts_b() {
  local a; a=$(sed -n 1p /tmp/parts/sizes)
  # the pieces still in the copy from earlier calls are the stashed ones: -n keeps those
  cp -n "$R"/.gpu/bundle/p/bundle.part* /tmp/parts/ || return 1
  cat /tmp/parts/bundle.part* | tail -c +"$((a + 1))" | tar -xJ -C /tmp/site
}
