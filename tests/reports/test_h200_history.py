"""Issue 52's GPU runs of the history axis (reports/h200/history/: three device calls of
benchmarks/gpu_history.sh, each on one H100; run 4 with MTP): every claim its README, the project README and
docs/histories.md make, computed from the archived records, manifests and server logs, so a
doc that drifts from the records fails."""
from __future__ import annotations

import gzip
import json
import re
from collections import Counter, defaultdict
from pathlib import Path

import pytest

from harness.records.store import read_jsonl

ROOT = Path(__file__).resolve().parents[2]
HERE = ROOT / "reports" / "h200" / "history"
PAGE = (HERE / "README.md").read_text()
DOCS = {name: (ROOT / name).read_text() for name in ("README.md", "docs/histories.md")}
PROCS = ("fap_all", "pw_none")
GPU = {"run1": "GPU-75aaa4f9-d986-e058-88a2-fe897472688a",
       "run2": "GPU-8797883c-de57-1949-0799-85091710744c",
       "run3": "GPU-4a531710-325b-6d96-a9ad-d18516c31edd",
       "run4-mtp": "GPU-d6e5e111-347e-408f-6c15-efc5bf2fe772"}
RUNS = list(GPU)
ABORT_LINE = re.compile(r"aborted request=\S+ computed=(\d+) of=(\d+)")


def _records(run: str, proc: str) -> list[dict]:
    return read_jsonl(HERE / run / f"{proc}.jsonl.gz")


def _by_history(run: str, proc: str) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = defaultdict(list)
    for r in _records(run, proc):
        out[r["config"].get("history") or "none"].append(r)
    return out


def _proofs(recs: list[dict]) -> list[dict]:
    """The records of the phase a history runs at (they carry its proof)."""
    return [r for r in recs if r.get("history")]


def _log(run: str, prefix: str) -> str:
    (path,) = (HERE / run / "device" / "logs").glob(f"{prefix}*.log.gz")
    return gzip.open(path, "rt").read()


def _manifest(run: str, proc: str) -> dict:
    return json.loads((HERE / run / f"{proc}.manifest.json").read_text())


@pytest.mark.parametrize("run", RUNS)
def test_one_h100_per_run_and_the_code_it_ran(run):
    digest = {"run1": "src8373fa6d2988", "run2": "srcedf9c6614d3d", "run3": "srce8e49537a12d",
              "run4-mtp": "srcf0ee80d1339f"}[run]
    for proc in PROCS:
        m = _manifest(run, proc)
        uuids = {g["uuid"] for slot in m["gpus"].values() for g in slot}
        assert uuids == {GPU[run]}
        assert {g["model"] for slot in m["gpus"].values() for g in slot} == {"NVIDIA H100 80GB HBM3"}
        assert m["harness_version"].endswith(digest) and digest in PAGE
        assert m["interrupted"] is (run in ("run1", "run3"))
        assert {r["engine_version"] for r in _records(run, proc)
                if r["verdict"] != "boot-fail"} == {"0.26.0"}
    assert GPU[run] in PAGE
    timings = (HERE / run / "device" / "timings.txt").read_text()
    want = {"run1": ("rc=124",) * 2, "run2": ("rc=0 344s",) * 2, "run3": ("rc=124",) * 2,
            "run4-mtp": ("rc=1 447s", "rc=0 447s")}[run]
    assert [ln.split(" ", 1)[0] for ln in timings.splitlines() if " rc=" in ln] == list(PROCS)
    for proc, rc in zip(PROCS, want):
        assert f"{proc} {rc}" in timings
    commands = (HERE / run / "device" / "commands.txt").read_text()
    hist = {"run1": "none,abort-retry,interleave,sibling,evict,next-turn",
            "run2": "abort-retry,sibling,evict,next-turn", "run3": "interleave",
            "run4-mtp": "abort-retry,sibling,evict,next-turn"}[run]
    assert commands.count(f"--history {hist} ") == 2
    spec = "mtp" if run == "run4-mtp" else "ngram"
    assert commands.count(f"--spec {spec} --draft-tokens 3 ") == 2


R4 = "run4-mtp"
FLAT = " ".join(PAGE.split())   # the page's prose, its line breaks undone


def test_run4_every_history_proven_and_all_ok_but_one_point():
    """MTP k = 3: pw_none all ok; fap_all one invalid restore point, confirmed ok fresh."""
    for proc in PROCS:
        recs = _records(R4, proc)
        assert {(r["config"]["spec"], r["config"]["draft_tokens"]) for r in recs} == {("mtp", 3)}
        gpus = {(g["uuid"], g["model"]) for r in recs for g in r["server_boot"]["gpu"]}
        assert gpus == {(GPU[R4], "NVIDIA H100 80GB HBM3")}
        assert {r["engine_version"] for r in recs} == {"0.26.0"}
        want = {"fap_all": {"ok": 129, "invalid": 1}, "pw_none": {"ok": 128}}[proc]
        assert Counter(r["verdict"] for r in recs) == want and len(recs) == sum(want.values())
        for name, rs in _by_history(R4, proc).items():
            proofs = _proofs(rs)
            proven = sum(r["history"]["proven"] for r in proofs)
            if (proc, name) == ("fap_all", "abort-retry"):
                assert (len(rs), len(proofs), proven) == (34, 17, 16)
            else:
                assert {r["verdict"] for r in rs} == {"ok"} and len(rs) == 32
                assert len(proofs) == proven == 16, (proc, name)
                assert f"| `{name}` | 32 ok, 16/16 proven | 32 ok, 16/16 proven |" in PAGE
    assert "| `abort-retry` | 33 ok, 1 invalid; 16/17 proven | 32 ok, 16/16 proven |" in PAGE
    assert "`pw_none`: 128 records, all ok" in FLAT
    assert "130 records, 129 ok and 1 `invalid`" in FLAT
    assert "(57 both ok" in (HERE / R4 / "fap_all.md").read_text()
    assert "56 cells measured on both, 56 agree" in (HERE / R4 / "pw_none.md").read_text()


def test_run4_the_invalid_point_is_the_abort_after_the_whole_prefill():
    (bad,) = [r for r in _records(R4, "fap_all") if r["verdict"] != "ok"]
    assert (bad["config"]["history"], bad["residue"], bad["phase"], bad["isolation"]) == \
        ("abort-retry", 127, "cold", "restore")
    assert bad["reason"].startswith("history abort-retry not proven: no abort line of the "
                                    "request before its prefill ended")
    assert (bad["cached_tokens"], bad["prompt_tokens"]) == (768, 1151)
    first, final = bad["history"]["log"]
    assert "start=0 tokens=512 of=1151 step=188" in first
    assert "final prefill chunk" in final and "computed=1024" in final
    fresh = [r for r in _proofs(_by_history(R4, "fap_all")["abort-retry"])
             if r["residue"] == 127 and r["isolation"] == "fresh"]
    assert len(fresh) == 1 and fresh[0]["history"]["proven"] and fresh[0]["verdict"] == "ok"
    log = _log(R4, "fap_all-abort-retry-restore")
    rid = "chatcmpl-rl-03498d0ae848"
    starts = re.findall(rf"prefill chunk: request={rid}-aborted-\S+ start=(\d+) ", log)
    assert starts == ["0", "512", "768", "1024"]   # the whole prompt, before the pause
    first_chunk = log.index(f"request={rid}-aborted")
    reset = log.rindex("Successfully reset prefix cache", 0, first_chunk)
    assert "prefill chunk" not in log[reset:first_chunk]   # nothing ran after the restore
    end = log.index(f"final prefill chunk: request={rid}-aborted")
    pause = log.index("POST /sleep?level=0&mode=keep", end)
    abort = re.search(rf"aborted request={rid}-aborted-\S+ computed=(\d+) of=(\d+)", log)
    assert end < pause < abort.start() and abort.groups() == ("1151", "1151")
    retry = re.search(rf"prefill chunk: request={rid}-retry-\S+ start=(\d+) ", log)
    assert retry[1] == "768" and retry.start() > abort.start()
    for text in ("no abort line of the request before its prefill ended", "computed=1151 of=1151",
                 "this point's own aborted send**", "Not a harness defect"):
        assert text in FLAT


def test_run4_mtp_drops_a_block_from_every_hit():
    computed, retry_hit = Counter(), {}
    for proc in PROCS:
        hists = _by_history(R4, proc)
        for r in _proofs(hists["abort-retry"]):
            lines = [m for m in map(ABORT_LINE.search, r["history"]["log"]) if m]
            if not r["history"]["proven"]:
                assert not lines
                continue
            (line,) = lines
            assert r["config"]["max_num_batched_tokens"] == 512 and r["config"]["block_size"] == 256
            done = int(line[1])
            computed[done] += 1
            retry_hit.setdefault(done, set()).add(r["cached_tokens"])
        assert {r["cached_tokens"] for name in hists for r in hists[name]
                if r["phase"] == "self-hit" and name != "evict"} == {768}
        for r in _proofs(hists["next-turn"]):
            assert re.fullmatch(r"hit 768, tail 76[7-9]|hit 768, tail 77[0-3]",
                                r["history"]["finding"])
    assert computed == {512: 31, 768: 1} and retry_hit == {512: {0}, 768: {512}}
    for text in ("computed = **512** (31 of the 32 proven points) or **768** (1)", "retry hit **0**",
                 "hit **768** of the first turn plus a tail of 767–773"):
        assert text in FLAT


def test_run3_interleave_proven_at_every_finished_point_and_all_ok():
    """B continuing A's conversation (918475b) hit A's last cached block at every point."""
    b_lengths, a_lengths = set(), set()
    for proc in PROCS:
        recs = _records("run3", proc)
        assert len(recs) == 24 and {r["verdict"] for r in recs} == {"ok"}
        assert set(_by_history("run3", proc)) == {"interleave"}
        proofs = _proofs(recs)
        assert len(proofs) == 12 and all(r["history"]["proven"] for r in proofs)
        assert Counter(r["isolation"] for r in proofs) == {"restore": 9, "fresh": 3}
        assert Counter(r["residue"] for r in proofs if r["isolation"] == "restore") == \
            {0: 1, 1: 1, 3: 2, 4: 2, 5: 2, 127: 1}
        fresh = {r["residue"] for r in proofs if r["isolation"] == "fresh"}
        assert fresh == {"fap_all": {0, 3, 4}, "pw_none": {3, 4, 5}}[proc]
        for r in proofs:
            b, a = r["history"]["sends"]
            assert (b["role"], a["role"]) == ("B", "A")
            assert b["cached_tokens"] in (1024, 1152)
            assert b["cached_tokens"] == (1024 if r["residue"] == 127 else 1152)
            assert a["cached_tokens"] == r["cached_tokens"] == \
                (1024 if r["residue"] in (0, 127) else 1152)
            assert a["prompt_tokens"] == r["prompt_tokens"] < b["prompt_tokens"]
            assert r["history"]["finding"] == \
                f"A after B hit {a['cached_tokens']} of {a['prompt_tokens']}"
            b_lengths.add(b["prompt_tokens"])
            a_lengths.add((r["residue"], r["prompt_tokens"]))
    assert (min(b_lengths), max(b_lengths)) == (1826, 1872) and "(1,826–1,872 tokens)" in PAGE
    assert a_lengths == {(0, 1152), (1, 1153), (3, 1155), (4, 1156), (5, 1157), (127, 1151)}
    for row in ("| 0 | 1,152 | 1,152 | 1,024 |", "| 1, 3, 4, 5 | 1,153–1,157 | 1,152 | 1,152 |",
                "| 127 | 1,151 | 1,024 | 1,024 |"):
        assert row in PAGE
    for proc in PROCS:
        report = (HERE / "run3" / f"{proc}.md").read_text()
        assert "6 cells measured on both, 6 agree" in report
        assert "predicts no break" in report and "**the sweep agrees** (no break)" in report
        assert "under history interleave the rule predicts: no lab mechanism" in report
    assert "Restore and fresh agreed on all 6 cells" in PAGE


def test_run3_was_cut_by_its_time_limit_with_its_points_on_disk():
    timings = (HERE / "run3" / "device" / "timings.txt").read_text()
    assert timings.count("rc=124 217s (limit 198s)") == 2
    for proc in PROCS:
        m = _manifest("run3", proc)
        assert m["interrupted"] is True and m["plan"]["points"] == 16
        assert m["plan"]["by_config"][m["configs"][0]["config_id"]] == {"fresh": 7, "restore": 9}
        # a finished point is its two phases, both on disk
        assert Counter(r["phase"] for r in _records("run3", proc)) == {"cold": 12, "self-hit": 12}
        assert "interrupted: 12 points finished and on disk" in \
            (HERE / "run3" / "device" / f"{proc}.stderr.txt").read_text()
        assert "(12 of 16 planned points finished)" in (HERE / "run3" / f"{proc}.md").read_text()
    assert "| both cut at 198 s (rc 124), 12 of 16 points each |" in PAGE


def test_run3_records_name_the_gpu_and_the_trace_shows_the_hits():
    for proc in PROCS:
        gpus = [g for r in _records("run3", proc) for g in r["server_boot"]["gpu"]]
        assert len(gpus) == 24
        assert {(g["uuid"], g["model"]) for g in gpus} == {(GPU["run3"], "NVIDIA H100 80GB HBM3")}
    log = _log("run3", "fap_all-interleave")   # residue 0 on fap_all's restore server
    chunk = r"prefill chunk: request=chatcmpl-rl-2862e2f9dc0a-{}-\S+ start=(\d+) tokens=\d+ of=(\d+) "
    b, a = (re.search(chunk.format(who), log) for who in "BA")
    assert (b[1], b[2], a[1], a[2]) == ("1152", "1864", "1024", "1152") and b.end() < a.start()
    cold = re.findall(r"prefill chunk: request=chatcmpl-90fbfc2460cd284c-\S+ start=(\d+) ", log)
    assert cold == ["0", "1024"] and log.index("90fbfc2460cd284c") < b.start()
    assert "B's first chunk at `start=1152 ... of=1864`, A's resend at\n`start=1024`" in PAGE


def test_run2_every_history_proven_at_every_point_and_all_ok():
    for proc in PROCS:
        recs = _records("run2", proc)
        assert len(recs) == 128 and {r["verdict"] for r in recs} == {"ok"}
        hists = _by_history("run2", proc)
        assert set(hists) == {"abort-retry", "sibling", "evict", "next-turn"}
        for name, rs in hists.items():
            proofs = _proofs(rs)
            points = {(r["residue"], r["document_seed"], r["isolation"], r["isolation_run"],
                       r["started_at"]) for r in proofs}
            assert len(rs) == 32 and len(proofs) == len(points) == 16, name
            assert all(r["history"]["proven"] for r in proofs), name
            assert Counter(r["isolation"] for r in rs) == {"restore": 18, "fresh": 14}
            assert f"| `{name}` | 32 ok, 16/16 proven | 32 ok, 16/16 proven |" in PAGE
    assert "128 records per process" in PAGE and "**all ok**" in PAGE
    for report in PROCS:
        assert "4 configurations, 24 data points, 48 phase cells (128 records): all ok." in \
            (HERE / "run2" / f"{report}.md").read_text()


def test_run2_abort_retry_aborted_mid_prefill_and_the_retry_hit_what_it_computed():
    computed = Counter()
    lengths = set()
    for proc in PROCS:
        for r in _proofs(_by_history("run2", proc)["abort-retry"]):
            c = r["config"]
            assert c["max_num_batched_tokens"] == 512 and c["block_size"] == 256
            assert c["async_scheduling"] == "off"
            assert r["history"]["metrics"]["paused"] is True
            (line,) = [m for m in map(ABORT_LINE.search, r["history"]["log"]) if m]
            done, of = int(line[1]), int(line[2])
            assert 0 < done < of == r["prompt_tokens"]
            retry = [s for s in r["history"]["sends"] if s["role"] == "retry"][0]
            assert retry["cached_tokens"] == done == r["cached_tokens"]
            computed[done] += 1
            lengths.add(of)
            want = {"fap_all": "applied", "pw_none": "off"}[proc]
            assert r["patch_status"] == {"prefill-discriminator": want, "sliding-window-guard": want}
    assert computed == {512: 29, 1024: 3} and (min(lengths), max(lengths)) == (1151, 1157)
    assert "**512** (29 points) or **1,024** (3) of 1,151–1,157" in PAGE
    assert "`async_scheduling: off`" in PAGE
    log = _log("run2", "pw_none-abort-retry")
    aborted = log.index("aborted request=chatcmpl-rl-77212420b3c8-aborted")
    assert "computed=512 of=1155" in log[aborted:aborted + 120]
    assert re.search(r"request=chatcmpl-rl-77212420b3c8-retry-\S+ start=512 ", log[aborted:])


def test_run2_evict_missed_after_the_pool_turned_over():
    reasons = Counter()
    for proc in PROCS:
        for r in _proofs(_by_history("run2", proc)["evict"]):
            m = r["history"]["metrics"]
            assert r["config"]["num_gpu_blocks"] == 134 and r["config"]["max_model_len"] == 1792
            assert m["pool_tokens"] == 134 * 256 == 34304 < m["evictor_tokens"]
            assert m["evictions"] == 0 and r["cached_tokens"] == 0
            reasons[r["history"]["reason"]] += 1
    assert set(reasons) == {f"{n} evictors, then the measured send: miss (cached_tokens 0)"
                            for n in (31, 32)}
    assert "max_num_seqs': 134" in _log("run2", "fap_all-evict")
    assert "evicted" not in _log("run2", "fap_all-evict")
    assert "31 or 32 evictors" in PAGE and "34,304 tokens" in PAGE


def test_run2_next_turn_hit_the_first_turn_and_was_judged_by_its_cold_control():
    found, lengths = set(), set()
    for proc in PROCS:
        for r in _proofs(_by_history("run2", proc)["next-turn"]):
            (control,) = [s for s in r["history"]["sends"] if s["role"] == "cold-control"]
            assert control["cached_tokens"] == 0 and control["answer"]
            assert re.search(r"the new turn's cold control, which differs from the passage at "
                             r"char [04] ", r["reason"])
            hit, tail = map(int, re.fullmatch(r"hit (\d+), tail (\d+)",
                                              r["history"]["finding"]).groups())
            assert hit + tail == r["prompt_tokens"] and hit == r["cached_tokens"]
            found.add((r["residue"], hit, tail))
            lengths.add(r["prompt_tokens"])
    assert {(h, t) for res, h, t in found if res != 127} == {(1152, t) for t in (384, 385, 387, 388, 389)}
    assert {(h, t) for res, h, t in found if res == 127} == {(1024, 511)}
    assert (min(lengths), max(lengths)) == (1535, 1541) and "(1,535–1,541 templated" in PAGE
    assert "tail of 384–389 (residue 127: hit 1,024, tail 511)" in PAGE


def test_run2_sibling_prefilled_both_in_one_step():
    for proc in PROCS:
        for r in _proofs(_by_history("run2", proc)["sibling"]):
            assert r["config"]["max_num_batched_tokens"] == 2304
            assert re.fullmatch(r"both prefilled in step \d+", r["history"]["reason"])
            assert r["history"]["finding"] in ("2 shared step(s)", "3 shared step(s)")


# run 1: (history) -> {process: Counter((phase, verdict))} and the README's cells
RUN1 = {
    "none": ({"ok": 32}, {"ok": 32}, "32 ok", "32 ok"),
    "abort-retry": ({"boot-fail": 40}, {"boot-fail": 40}, "40 boot-fail", "40 boot-fail"),
    "interleave": ({"ok": 13, "invalid": 13}, {"ok": 13, "invalid": 13},
                   "13 ok cold, 13 invalid", "13 ok cold, 13 invalid"),
    "sibling": ({"timeout": 6}, {"timeout": 6}, "6 timeout", "6 timeout"),
    "evict": ({"boot-fail": 18}, {"ok": 18}, "18 boot-fail", "18 ok, 9/9 proven (a miss)"),
    "next-turn": ({"ok": 9, "diverged": 9}, {"ok": 9, "diverged": 9},
                  "9 ok cold, 9 diverged", "9 ok cold, 9 diverged"),
}


def test_run1_verdicts_per_history_are_the_readmes_table():
    for name, (fap, pw, fap_cell, pw_cell) in RUN1.items():
        for proc, want in zip(PROCS, (fap, pw)):
            assert Counter(r["verdict"] for r in _by_history("run1", proc)[name]) == want
        assert f"| `{name}` | {fap_cell} | {pw_cell} |" in PAGE
    for proc in PROCS:
        assert len(_records("run1", proc)) == 140
        for name in ("interleave", "next-turn"):   # the ok ones are the cold phase
            assert {r["phase"] for r in _by_history("run1", proc)[name]
                    if r["verdict"] == "ok"} == {"cold"}
    assert "(49 of 107 planned points finished)" in (HERE / "run1" / "fap_all.md").read_text()
    assert "(57 of 106 planned points finished)" in (HERE / "run1" / "pw_none.md").read_text()


def test_run1_boot_failures_and_their_causes():
    align = "In Mamba cache align mode, block_size (256) must be <= max_num_batched_tokens (128)"
    seqs = "max_num_seqs (1024) exceeds available Mamba cache blocks (134)"
    for proc in PROCS:
        for r in _by_history("run1", proc)["abort-retry"]:
            assert r["config"]["max_num_batched_tokens"] == 128
            assert align in "\n".join(r["log_excerpt"])
    for r in _by_history("run1", "fap_all")["evict"]:
        assert seqs in "\n".join(r["log_excerpt"])
    evict_pw = _proofs(_by_history("run1", "pw_none")["evict"])
    assert len(evict_pw) == 9 and all(r["history"]["proven"] and r["cached_tokens"] == 0
                                      for r in evict_pw)
    for proc in PROCS:
        assert align in _log("run1", f"{proc}-abort-retry-bootfail")
    assert seqs in _log("run1", "fap_all-evict-bootfail")
    for text in (align, seqs, "`98adafd`", "`0484411`", "`81e59aa`"):
        assert text in PAGE


def test_run1_interleave_was_invalid_at_every_point():
    for proc in PROCS:
        proofs = _proofs(_by_history("run1", proc)["interleave"])
        assert len(proofs) == 13
        for r in proofs:
            assert r["verdict"] == "invalid" and not r["history"]["proven"]
            assert r["history"]["reason"] == "B hit 0 tokens of A (wanted a part of A's prefix)"
            assert r["reason"].endswith("(answer judged ok: matches the reference sha1)")
            b, a = r["history"]["sends"]
            assert (b["role"], b["cached_tokens"]) == ("B", 0)
            assert a["role"] == "A" and a["cached_tokens"] in (1024, 1152)
    assert "B hit 0 tokens of A (wanted a part of A's prefix)" in PAGE
    assert "1,152 or 1,024" in PAGE


def test_run1_next_turn_hit_was_proven_but_the_answer_was_the_first_turns():
    for proc in PROCS:
        bad = [r for r in _by_history("run1", proc)["next-turn"] if r["verdict"] != "ok"]
        assert len(bad) == 9 and all(r["history"]["proven"] for r in bad)
        at = Counter(re.search(r"differs from the reference at char (\d+)", r["reason"])[1]
                     for r in bad)
        assert at == {"0": 8, "4": 1}
        assert not [s for r in bad for s in r["history"]["sends"] if s["role"] == "cold-control"]
        hits = {(r["residue"] == 127, r["history"]["finding"].split(",")[0]) for r in bad}
        assert hits == {(False, "hit 1152"), (True, "hit 1024")}


def test_run1_sibling_timed_out_unscheduled_and_the_oom():
    for proc in PROCS:
        recs = _by_history("run1", proc)["sibling"]
        assert {r["residue"] for r in recs} == {0, 1, 3}
        assert {r["isolation"] for r in recs} == {"restore"} and len(recs) == 6
    log = _log("run1", "fap_all-sibling-timeout")
    aborts = [m.start() for m in re.finditer(r"aborted request=\S+ computed=0 of=1152 step=0", log)]
    assert len(aborts) == 2 and aborts[0] < log.index("wake up the engine") < aborts[1]
    oom = _log("run1", "fap_all-interleave-oom")
    assert "CUDA out of memory" in oom
    (line,) = {ln for ln in oom.splitlines() if "torch.OutOfMemoryError" in ln and "ERROR" in ln}
    assert len(re.findall(r"Process \d+ has", line)) == 13
    for proc in PROCS:
        assert "boot-fail" not in {r["verdict"] for r in _by_history("run1", proc)["interleave"]}
    assert "thirteen other processes" in PAGE


@pytest.mark.parametrize("run", RUNS)
def test_the_page_is_the_table_the_device_printed(run):
    """summary.md (a regenerate.sh page, rerun by test_h200_archive.py) is byte for byte the
    table part of the summary the device returned."""
    returned = (HERE / run / "device" / "summary-as-returned.md").read_text()
    assert returned[returned.index("# History sweep:"):] == (HERE / run / "summary.md").read_text()
    assert f"page history/{run}/summary.md " in (HERE.parent / "regenerate.sh").read_text()


def test_the_folder_is_small():
    assert sum(p.stat().st_size for p in HERE.rglob("*") if p.is_file()) < 2 * 2**20


def test_the_project_docs_quote_the_h100_result():
    for doc in DOCS.values():
        assert "reports/h200/history/" in doc and "GPU-8797883c" in doc
        assert "GPU-4a531710" in doc and "NVIDIA H100 80GB HBM3" in doc
        assert "GPU-d6e5e111" in doc and "MTP k = 3" in doc
        assert "H100" in doc and "vLLM 0.26.0" in doc
    assert "128 records" in DOCS["README.md"]
