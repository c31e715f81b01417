#!/usr/bin/env bash
# Re-render the H200 reports (reports/h200/*.md) from the archived records in
# reports/h200/results/ with the harness's own `sweep report`, plus summary.md. No GPU needed:
# the sweeps themselves ran on the device (docs/gpu-notes.md, phase 3).
#
#   bash reports/h200/regenerate.sh
set -euo pipefail
cd "$(dirname "$0")"
SWEEP=${SWEEP:-"python -m harness"}
R=results
report() { local out=$1; shift; $SWEEP report "${@/#/$R/}" -o "$out" > /dev/null; echo "$out"; }
# kept REPORT...: a report archived as it came back, with no records here to render it from
kept() { local f; for f; do [ -f "$f" ] || { echo "missing: $f" >&2; exit 1; }; echo "$f (kept: no records)"; done; }
# a page a benchmark script prints from archived records (tests/reports/test_h200_archive.py
# reruns each and compares); rc 1 is compare_isolation's "cells differ", a finding, not a
# failure; anything above stops the script
page() { local out=$1 rc=0; shift; PYTHONPATH=${PYTHONPATH:-../..} "$@" > "$out" || rc=$?; [ "$rc" -le 1 ] || exit "$rc"; echo "$out"; }
# hybrid, ngram k=3, reset, the 4-configuration matrix, one document seed each
report reset-seed0.md 20261130-024432-3b01.jsonl.gz 20261130-024433-d002.jsonl.gz 20261130-024432-aa1c.jsonl.gz 20261130-024433-fc2b.jsonl.gz
report reset-seed1.md 20261130-024956-f6fb.jsonl.gz 20261130-024956-f1a8.jsonl.gz 20261130-024956-d1ce.jsonl.gz 20261130-024956-3d46.jsonl.gz
report reset-seed2.md 20261130-025211-04d5.jsonl.gz 20261130-025211-77b8.jsonl.gz 20261130-025211-2336.jsonl.gz 20261130-025211-e84a.jsonl.gz
# hybrid, ngram k=3, fresh server per point, residues 3,4,5,60, both graph modes x patches
report fresh-seed0.md 20261130-024433-daa8.jsonl.gz 20261130-024433-7cde.jsonl.gz
report fresh-seed1.md 20261130-024956-23ee.jsonl.gz 20261130-024956-3793.jsonl.gz
report fresh-seed2.md 20261130-025211-2686.jsonl.gz 20261130-025211-0a46.jsonl.gz
# controls on FULL_AND_PIECEWISE, unpatched: no speculative decoding, ngram k=4 (hybrid);
# the dense model (first of its three identical repeats; the others are in summary.md)
report controls-hybrid.md 20261130-025428-5fa6.jsonl.gz 20261130-025428-7488.jsonl.gz
report dense.md 20261130-024433-faae.jsonl.gz 20261130-024433-8d55.jsonl.gz
# the rerun from the committed weights (engine/tinymodel/weights/hybrid) on a one-GPU machine:
# the reset matrix in ONE harness process (--gpus 0,0,0,0), and the README's fresh command
report rerun-reset-matrix.md 20261130-030446-b688.jsonl.gz
report rerun-fresh.md 20261130-030446-b166.jsonl.gz
# issue 18 (2026-12-01, one H200): the user's own speculators. MTP (the committed head in
# weights/hybrid), reset, all residues, the 4-configuration matrix, k = 3 and k = 1; the
# fresh servers for the rule's residue (VLLM_LOGGING_LEVEL=DEBUG); DFlash k = 7 (every
# server refused the drafter at boot); ngram k = 4 on a fresh server (residue 5)
report mtp-reset-k3.md 20261201-091746-8abe.jsonl.gz
report mtp-reset-k1.md 20261201-091746-f51c.jsonl.gz
report mtp-fresh-k3.md 20261201-092428-9128.jsonl.gz
report mtp-fresh-k1.md 20261201-092428-a23a.jsonl.gz
report dflash-reset.md 20261201-091746-d159.jsonl.gz
report ngram-k4-fresh.md 20261201-091746-e7de.jsonl.gz
# issue 17 (2026-12-01, one H200): --isolation auto. The README's 4-configuration matrix
# (ngram k=3) from an empty compile cache in one harness process (8 slots on GPU 0), then
# ngram k=2 and k=4, FULL_AND_PIECEWISE unpatched, documents 0 and 1
report auto-matrix-k3.md 20261201-095803-fa07.jsonl.gz
report auto-ngram-k2-k4.md 20261201-100602-f154.jsonl.gz
# second device session of 2026-12-01 (one H200): DFlash (3-layer drafter) with
# --isolation auto, the 4-configuration matrix; ngram k = 1, 5 unpatched and k = 1..5
# patched, FULL_AND_PIECEWISE, documents 0 and 1, --isolation auto (all three interrupted
# by their time limit, records kept)
report dflash-auto.md 20261201-115154-d70a.jsonl.gz
report auto-ngram-k1-k5.md 20261201-115154-d292.jsonl.gz
report auto-ngram-patched.md 20261201-115154-d238.jsonl.gz
# issue 26 (2026-12-01, one H200): chunk budget 512 cold, --load 4, preemption pools. Only the
# reports came back (the call's $OUT held 9 files, 8 come back: shapes.tgz with the records and
# logs was lost), so they cannot be re-rendered: shapes/README.md
kept shapes/a_budget.md shapes/a_budget_patched.md shapes/b_load.md
kept shapes/c_preempt_24.md shapes/c_preempt_36.md shapes/c_preempt_54.md
# issue 24's state hunt (two rounds, reports/h200/find-state/README.md): the probe's tables
for round in round1 round2; do
  python ../../benchmarks/gpu_find_state.py --summarize "find-state/$round" > "find-state/$round.md"
  echo "find-state/$round.md"
done
# issue 24, --isolation restore (benchmarks/gpu_restore.sh 540 a,b,c1,p, then sweep --resume of
# b and c1 in a second call): the README matrix (ngram k=3) and ngram k=2,4 unpatched under
# --isolation auto (restore + plain fresh confirmations), sleep-mode fresh servers (p)
report restore-matrix-k3.md 20261201-225427-1d66.jsonl.gz
report restore-ngram-k2-k4.md 20261201-225427-54f0.jsonl.gz
report restore-sleep-mode-fresh.md 20261201-225927-b4db.jsonl.gz
# every cell measured both ways: restore vs fresh within b and c1; p's sleep-mode fresh
# servers vs c1's plain fresh servers; the per-point cost table
page restore/compare-b.txt python ../../benchmarks/compare_isolation.py $R/20261201-225427-1d66.jsonl.gz
page restore/compare-c1.txt python ../../benchmarks/compare_isolation.py $R/20261201-225427-54f0.jsonl.gz
page restore/compare-p.txt python ../../benchmarks/compare_isolation.py $R/20261201-225927-b4db.jsonl.gz --left fresh --vs $R/20261201-225427-54f0.jsonl.gz --right fresh
page restore/cost.md python ../../benchmarks/isolation_cost.py $R/20261201-225427-1d66.jsonl.gz $R/20261201-225427-54f0.jsonl.gz $R/20261201-225927-b4db.jsonl.gz --machine "one H200 (vLLM 0.26.0, tiny hybrid, up to 13 servers side by side on GPU 0)"
# issue 24, day 2 (2026-12-02, one H200): the README matrix again under --isolation auto
# (restore + plain fresh confirmations), gpu_restore.sh 585 b on a cold machine (interrupted at
# 527 s, 739 of 1,056 points), then sweep --resume on the warm machine: the final records
report restore-matrix-k3-day2.md 20261202-011253-0bd8.jsonl.gz
page restore/compare-day2.txt python ../../benchmarks/compare_isolation.py $R/20261202-011253-0bd8.jsonl.gz
page restore/cost-day2.md python ../../benchmarks/isolation_cost.py $R/20261202-011253-0bd8.jsonl.gz --machine "one H200 (vLLM 0.26.0, tiny hybrid, up to 12 servers side by side on GPU 0)"
# issue 23 (2026-12-02): sweep explain of residue 4 (ngram k=3, FULL_AND_PIECEWISE unpatched) on
# empty compile caches: the parent run's report, whose Explained section reads the explain run
# (20261202-012927-1061) beside it; interrupted after 9 of its 10 rungs
report explain-cold.md 20261202-012515-b8f4.jsonl.gz
# issue 26, day 2 (2026-12-02): gpu_shapes.sh 390, records this time: chunk budget 512 cold,
# --load 4 (reset and fresh), preemption pools of 24/36/54 blocks with --max-num-seqs 8
report shapes/day2/a_budget.md 20261202-013317-b8de.jsonl.gz
report shapes/day2/a_budget_patched.md 20261202-013317-e394.jsonl.gz
report shapes/day2/b_load.md 20261202-013317-df81.jsonl.gz
report shapes/day2/b_load_fresh.md 20261202-013317-6ffb.jsonl.gz
report shapes/day2/c_preempt_24.md 20261202-013317-8bca.jsonl.gz
report shapes/day2/c_preempt_36.md 20261202-013317-9f32.jsonl.gz
report shapes/day2/c_preempt_54.md 20261202-013317-021c.jsonl.gz
python summarize.py > summary.md && echo summary.md
# issue 32: the region hunt (benchmarks/gpu_poison.py on the H200, 2026-12-02)
page poison/hunt.md python ../../benchmarks/gpu_poison_summary.py poison/call1-records.jsonl.gz poison/call2-records.jsonl.gz
# issue 35: the cost curve (benchmarks/gpu_cost_curve.sh 565 on one H200, 2026-12-02; dummy
# weights: cost only, no verdicts): the table from the archived records (cost/README.md)
page cost/cost_curve.md python ../../benchmarks/cost_table.py cost/records.jsonl.gz --manifest cost/manifest.json
# issue 51: restore at the speed of memory (benchmarks/gpu_cost_curve.sh 470 --servers 27b@20
# --no-sleep --gpu-gib 79 on one H200, 2026-12-06; dummy weights: cost only, no verdicts):
# the old per-view fill, the once-per-storage fill and the dirty restore beside the copy
# bandwidth limit (cost-restore/README.md)
page cost-restore/cost_curve.md python ../../benchmarks/cost_table.py cost-restore/records.jsonl.gz --manifest cost-restore/manifest.json
# its second run (the same command at LIMIT 390 on one H100 80GB HBM3, 2026-12-06; the cold
# boot left no point time: cost-restore/README.md), alone and beside the first, by GPU
page cost-restore/run2-h100/cost_curve.md python ../../benchmarks/cost_table.py cost-restore/run2-h100/records.jsonl.gz --manifest cost-restore/run2-h100/manifest.json
page cost-restore/both.md python ../../benchmarks/cost_table.py cost-restore/records.jsonl.gz cost-restore/run2-h100/records.jsonl.gz --manifest cost-restore/manifest.json --manifest cost-restore/run2-h100/manifest.json
# its third run (the same command at LIMIT 560 on one H100 80GB HBM3, 2026-12-06; every point
# ran: cost-restore/README.md), alone and beside the other two, each server named by its GPU and run
page cost-restore/run3-h100/cost_curve.md python ../../benchmarks/cost_table.py cost-restore/run3-h100/records.jsonl.gz --manifest cost-restore/run3-h100/manifest.json
page cost-restore/all-runs.md python ../../benchmarks/cost_table.py cost-restore/records.jsonl.gz cost-restore/run2-h100/records.jsonl.gz cost-restore/run3-h100/records.jsonl.gz --manifest cost-restore/manifest.json --manifest cost-restore/run2-h100/manifest.json --manifest cost-restore/run3-h100/manifest.json
# issue 32, round 3 (2026-12-03, three H200 machines; determinism/README.md): fixed kernel
# choices beside plain servers (benchmarks/gpu_determinism.py: m1, m2), independent
# compiles with and without PYTHONHASHSEED=0 (m3), what each server's autotuner kept; then
# on m2 the README matrix under --isolation auto with the mode (restore by the fill) and
# its no-false-positive check against --poison off (gpu_restore.sh 580 b,n)
page determinism/round3.md python ../../benchmarks/gpu_determinism_summary.py determinism/round3-m1.jsonl.gz determinism/round3-m2.jsonl.gz
page determinism/hashseed.md python ../../benchmarks/gpu_determinism_summary.py determinism/hashseed-m3.jsonl.gz
page determinism/round4.md python ../../benchmarks/gpu_determinism_summary.py determinism/round4-m5.jsonl.gz determinism/round4-m6.jsonl.gz
page determinism/autotune.md python ../../benchmarks/gpu_determinism_summary.py --autotune determinism/logs-m1.tgz determinism/logs-m2.tgz determinism/logs-m3.tgz
report restore-matrix-k3-poison.md 20261203-060736-0533.jsonl.gz
report poison-off-fap-patched.md 20261203-060736-adb1.jsonl.gz
report poison-off-pw-unpatched.md 20261203-060736-9fee.jsonl.gz
page determinism/compare-b.txt python ../../benchmarks/compare_isolation.py $R/20261203-060736-0533.jsonl.gz
page determinism/compare-on-off.txt python ../../benchmarks/compare_isolation.py $R/20261203-060736-0533.jsonl.gz --left restore --vs $R/20261203-060736-adb1.jsonl.gz $R/20261203-060736-9fee.jsonl.gz --right restore
page determinism/cost.md python ../../benchmarks/isolation_cost.py $R/20261203-060736-0533.jsonl.gz --machine "one H200 (vLLM 0.26.0, tiny hybrid, 10 slots on GPU 0; machine m2 of round 3)"
# issue 32, round 4 on a second machine (2026-12-03, session 3, m6): the README matrix under
# --isolation auto with the final mode (combo kernels off), restore by the fill vs fresh, and
# its no-false-positive check against --poison off (gpu_restore.sh 580 b,n)
report restore-matrix-k3-poison-m6.md 20261203-133156-4ea0.jsonl.gz
report poison-off-fap-patched-m6.md 20261203-133156-9a5e.jsonl.gz
report poison-off-pw-unpatched-m6.md 20261203-133156-bb6d.jsonl.gz
page determinism/compare-b-m6.txt python ../../benchmarks/compare_isolation.py $R/20261203-133156-4ea0.jsonl.gz
page determinism/compare-on-off-m6.txt python ../../benchmarks/compare_isolation.py $R/20261203-133156-4ea0.jsonl.gz --left restore --vs $R/20261203-133156-9a5e.jsonl.gz $R/20261203-133156-bb6d.jsonl.gz --right restore
page determinism/cost-m6.md python ../../benchmarks/isolation_cost.py $R/20261203-133156-4ea0.jsonl.gz --machine "one H200 (vLLM 0.26.0, tiny hybrid, 10 slots on GPU 0; machine m6 of round 4)"
# issue 48 (2026-12-06, one H200, bytes/README.md): ngram k = 4 and k = 3 servers with the
# mode, each compiling its own cache, one per k with the candidate pins
# (bash benchmarks/gpu_bytes_experiment.sh 250 h200a)
page bytes/summary-h200a.md python ../../benchmarks/gpu_bytes_summary.py bytes/records-h200a.jsonl.gz
# the same experiment on one H100 80GB HBM3 with h200a's k4-own0 cache carried
# (bash benchmarks/gpu_bytes_experiment.sh 230 h100b; "h100b" is a third machine, not issue 48's H100 B)
page bytes/summary-h100b.md python ../../benchmarks/gpu_bytes_summary.py bytes/records-h100b.jsonl.gz
# the same experiment on another H100 80GB HBM3, no cache carried (bash
# benchmarks/gpu_bytes_experiment.sh 240 h100c): two k = 4 own compiles gave the two classes
page bytes/summary-h100c.md python ../../benchmarks/gpu_bytes_summary.py bytes/records-h100c.jsonl.gz
# the same experiment on a fourth H100 80GB HBM3 with Inductor's matmul padding off in every
# server (export TORCHINDUCTOR_SHAPE_PADDING=0; bash benchmarks/gpu_bytes_experiment.sh 240 h100d-nopad)
page bytes/summary-h100d-nopad.md python ../../benchmarks/gpu_bytes_summary.py bytes/records-h100d-nopad.jsonl.gz
# issue 52, the history axis on vLLM (2026-12-06, one H100 80GB HBM3 per call; history/README.md):
# bash benchmarks/gpu_history.sh 550 (all six histories; cut by its time limit) and then
# HISTORIES=abort-retry,sibling,evict,next-turn SLOTS=4 bash benchmarks/gpu_history.sh 555 after
# the fixes; each call's two harness processes (fap_all, pw_none), every cell and its proof
page history/run1/summary.md python ../../benchmarks/gpu_history_summary.py history/run1/fap_all.jsonl.gz history/run1/pw_none.jsonl.gz --machine "NVIDIA H100 80GB HBM3"
page history/run2/summary.md python ../../benchmarks/gpu_history_summary.py history/run2/fap_all.jsonl.gz history/run2/pw_none.jsonl.gz --machine "NVIDIA H100 80GB HBM3"
# run 3 (same day, one H100 80GB HBM3): HISTORIES=interleave SLOTS=2 bash benchmarks/gpu_history.sh 280
# after 918475b (interleave's B continues A's conversation); both processes cut by their time
# limit, their finished points kept
page history/run3/summary.md python ../../benchmarks/gpu_history_summary.py history/run3/fap_all.jsonl.gz history/run3/pw_none.jsonl.gz --machine "NVIDIA H100 80GB HBM3"
# run 4 (same day, one H100 80GB HBM3): the same four histories with MTP k = 3,
# HISTORIES=abort-retry,sibling,evict,next-turn SLOTS=4 bash benchmarks/gpu_history.sh 555 mtp
page history/run4-mtp/summary.md python ../../benchmarks/gpu_history_summary.py history/run4-mtp/fap_all.jsonl.gz history/run4-mtp/pw_none.jsonl.gz --machine "NVIDIA H100 80GB HBM3"
