#!/usr/bin/env bash
# The action's sweep step (action.yml). Every input arrives in the environment (INPUT_*),
# never interpolated into this script, so a value cannot inject shell.
#
# It runs `sweep` into a fresh output folder and writes to $GITHUB_OUTPUT: exit-code,
# run-id, out-dir, results (JSONL), manifest, report (markdown), junit, logs. It exits 0 whenever
# it could record the sweep's exit code, so the later steps still upload, publish and
# comment a failing sweep; the action's last step fails the job with that code.
set -uo pipefail

fail() { echo "::error::residue-sweep: $*" >&2; exit 2; }

out_base=${INPUT_OUT_DIR:?}
mkdir -p "$out_base" || fail "cannot create out-dir $out_base"
out_base=$(cd "$out_base" && pwd)
# One folder per sweep: a self-hosted runner keeps its workspace between jobs.
out=$(mktemp -d "$out_base/sweep-XXXXXX") || fail "cannot create a folder under $out_base"
junit="$out/junit.xml"

args=(--engine "${INPUT_ENGINE:?}" --spec "${INPUT_SPEC:?}" --ctx "${INPUT_CTX:?}"
      --residues "${INPUT_RESIDUES:?}" --out "$out/results" --reports-dir "$out/reports"
      --junit "$junit" --no-progress)
if [ -n "${INPUT_MODEL:-}" ]; then args+=(--model "$INPUT_MODEL"); fi
if [ -n "${INPUT_BASELINE:-}" ]; then
  baseline=$INPUT_BASELINE
  if [ ! -f "$baseline" ]; then
    # A run id: its records under out-dir (an earlier sweep's own folder, kept by a runner
    # that keeps its workspace, or a downloaded artifact), the newest if several. This
    # sweep's --out is a fresh folder, where sweep itself could never find it.
    case "$baseline" in
      *[!A-Za-z0-9._-]* | .* ) fail "baseline $baseline: not a results file, and not a run id" ;;
    esac
    found=$(find "$out_base" -maxdepth 4 -type f \( -name "$baseline.jsonl" -o -name "$baseline.jsonl.gz" \) \
              -printf '%T@ %p\n' 2>/dev/null | sort -rn | head -n 1 | cut -d' ' -f2-)
    if [ -z "$found" ]; then
      fail "baseline $baseline: not a results file, and no run $baseline under out-dir $out_base"
    fi
    baseline=$found
  fi
  args+=(--baseline "$baseline")
fi
if [ -n "${INPUT_EXTRA_ARGS:-}" ]; then
  # Split like a POSIX shell (quotes honoured) without evaluating anything: shlex, NUL-separated.
  extra_file="$out/extra-args.bin"
  python -c 'import os, shlex, sys; sys.stdout.write("".join(a + "\0" for a in shlex.split(os.environ["INPUT_EXTRA_ARGS"])))' \
    >"$extra_file" || fail "extra-args is not a valid argument list: $INPUT_EXTRA_ARGS"
  mapfile -d '' -t extra <"$extra_file"
  rm -f "$extra_file"
  args+=("${extra[@]}")
fi

echo "sweep ${args[*]}"
sweep "${args[@]}"
code=$?

manifest=$(ls -t "$out/results"/*.manifest.json 2>/dev/null | head -n 1)
run_id=""
if [ -n "$manifest" ]; then run_id=$(basename "$manifest" .manifest.json); fi
results="" report=""
if [ -n "$run_id" ] && [ -f "$out/results/$run_id.jsonl" ]; then results="$out/results/$run_id.jsonl"; fi
if [ -n "$run_id" ] && [ -f "$out/reports/$run_id.md" ]; then report="$out/reports/$run_id.md"; fi
logs=""  # the servers' logs: what explains a crash or a boot failure
if [ -n "$run_id" ] && [ -d "$out/results/$run_id.logs" ]; then logs="$out/results/$run_id.logs"; fi
if [ ! -f "$junit" ]; then junit=""; fi
{
  echo "exit-code=$code"
  echo "run-id=$run_id"
  echo "out-dir=$out"
  echo "results=$results"
  echo "manifest=$manifest"
  echo "report=$report"
  echo "junit=$junit"
  echo "logs=$logs"
} >>"${GITHUB_OUTPUT:?}"
echo "sweep exited $code (0 ok, 1 not ok or a regression, 2 usage, 3 could not run, 4 an output failed, 130 interrupted); report: ${report:-none}"
exit 0
