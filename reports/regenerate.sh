#!/usr/bin/env bash
# Regenerate the committed lab reproductions of the thread's tables (reports/*.md) and the
# real-sweep fixtures the report tests read (tests/reports/fixtures/lab/*.jsonl.gz).
#
#   reports/regenerate.sh            # everything (CPU only, the embedded lab engine)
#   ONLY=fvp reports/regenerate.sh   # one of: fvp full128 fixed128 ladder
#   SLOTS=4 reports/regenerate.sh    # parallel fresh servers (default: all cores)
#   RENDER_ONLY=1 reports/regenerate.sh  # no sweeps: re-render reports/ from the fixtures
#
# Every data point runs on its own fresh lab server (--isolation fresh), so the tables
# show what the thread showed with the method the thread settled on. A sweep that finds a
# broken point exits 1: that is the expected result here, not a failure of this script.
set -euo pipefail
cd "$(dirname "$0")/.."

SWEEP=${SWEEP:-"python -m harness"}
WORK=results/regen   # relative, so the manifests' command lines read the same anywhere
FIX=tests/reports/fixtures/lab
SLOTS_ARG=${SLOTS:+--slots $SLOTS}
mkdir -p "$FIX" reports

# RENDER_ONLY=1: no sweeps; re-render reports/ from the kept fixtures (after a change to
# the report code). The tests fail until this has been run.
if [ -n "${RENDER_ONLY:-}" ]; then
  tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
  for gz in "$FIX"/*.jsonl.gz; do
    name=$(basename "$gz" .jsonl.gz)
    gunzip -c "$gz" > "$tmp/$name.jsonl"
    cp "$FIX/$name.manifest.json" "$tmp/$name.manifest.json"
    $SWEEP report "$tmp/$name.jsonl" -o "reports/$name.md"
  done
  if [ -f "$tmp/full128.jsonl" ] && [ -f "$tmp/fixed128.jsonl" ]; then
    $SWEEP compare "$tmp/full128.jsonl" "$tmp/fixed128.jsonl" > reports/compare-unpatched-vs-patched.md || true
  fi
  exit 0
fi

# run NAME SWEEP-ARGS... : one sweep into $WORK/NAME, kept as $FIX/NAME.{jsonl.gz,manifest.json}
run() {
  local name=$1; shift
  case " ${ONLY:-$name} " in *" $name "*) ;; *) return 0 ;; esac
  echo "== $name: sweep $*" >&2
  local rc=0
  rm -rf "${WORK:?}/$name"
  # shellcheck disable=SC2086
  $SWEEP "$@" $SLOTS_ARG --out "$WORK/$name" --reports-dir "$WORK/$name/reports" \
    --no-progress >/dev/null || rc=$?
  if [ "$rc" -gt 1 ]; then echo "sweep $name failed (exit $rc)" >&2; exit "$rc"; fi
  local jsonl; jsonl=$(ls "$WORK/$name"/*.jsonl)
  # kept as the test fixture (gzip -n: no name/time in the header, so reruns diff cleanly);
  # tests/reports/test_recorded_runs.py checks that reports/NAME.md is exactly what it renders
  gzip -n -9 -c "$jsonl" > "$FIX/$name.jsonl.gz"
  cp "${jsonl%.jsonl}.manifest.json" "$FIX/$name.manifest.json"
  $SWEEP report "$jsonl" -o "reports/$name.md"
}

# 1. SPEC=mtp CTX=huge, FULL_AND_PIECEWISE vs PIECEWISE at residues 3/4/5, cold and
#    self-hit (mhenrichsen's and mjungnickel18's tables). Unpatched, so Bug B is live.
run fvp --spec mtp --ctx huge --residues 3-5 --cudagraph FULL_AND_PIECEWISE,PIECEWISE \
  --patches none

# 2. The 128-residue summary: 127 clean, 1 broken, and it is k+1 = 4.
run full128 --spec mtp --ctx huge --residues all --cudagraph FULL_AND_PIECEWISE --patches none

# 3. The same with the fixes applied: 128/128 clean (compared with 2 below).
run fixed128 --spec mtp --ctx huge --residues all --cudagraph FULL_AND_PIECEWISE --patches all

# 4. The block / match-unit ladder (mjungnickel18): only the match unit arms Bug B.
#    dflash2 at k=7, as on the thread's SPEC=dflash2 service: broken at residue 8.
run ladder --spec dflash2 --ctx huge --residues all --cudagraph FULL_AND_PIECEWISE \
  --block-size 16,128 --prefix-match-unit none,128 --patches none

# What the fixes changed, per residue (sweep compare).
old=$(ls "$WORK"/full128/*.jsonl 2>/dev/null || true)
new=$(ls "$WORK"/fixed128/*.jsonl 2>/dev/null || true)
if [ -n "$old" ] && [ -n "$new" ]; then
  $SWEEP compare "$old" "$new" > reports/compare-unpatched-vs-patched.md || true
fi
echo "reports/ and $FIX/ regenerated" >&2
