"""Issue 48: records name the GPU and the compile, and a broken cell's bytes are compared
only between runs that share a compile: on the lab, two "compiles" (``--compile-seed``)
give other broken bytes at the cold-breaking cell and the same ok answers; ``compare`` and
the gate say "still broken, bytes not comparable" across them and compare bytes within one."""
from __future__ import annotations

import json

from engine.vllm.caches import compile_dirs, compile_fingerprint
from harness.publish.compare import compare_records, render_compare_markdown
from harness.records.phase_record import PhaseRecord
from harness.records.same_compile import bytes_between, compile_phrase
from harness.serve import gpu_info

# the rule's cell breaks cold on the lab (the aligned final chunk is 1 + k tokens)
RULE = ("--spec", "ngram", "--draft-tokens", "4", "--cudagraph", "FULL_AND_PIECEWISE",
        "--patches", "none", "--engine-arg=--mamba-cache-mode=align", "--residues", "4,5",
        "--context", "1200", "--seed", "0", "--slots", "1", "--isolation", "fresh",
        "--poison", "on")


def _rec(verdict: str, sha: str, fp: str | None) -> PhaseRecord:
    boot = {"log": "s.log", **({"compile": {"fingerprint": fp}} if fp else {})}
    return PhaseRecord.from_dict({"run_id": "r", "config_id": "c", "config_label": "L",
                                  "residue": 5, "phase": "cold", "verdict": verdict,
                                  "sha1": sha, "server_boot": boot})


def test_bytes_are_compared_only_under_one_compile():
    same = bytes_between(_rec("broken", "a" * 40, "f1"), _rec("broken", "a" * 40, "f1"))
    assert same["bytes"] == "same"
    assert bytes_between(_rec("broken", "a" * 40, "f1"),
                         _rec("diverged", "b" * 40, "f1"))["bytes"] == "changed"
    other = bytes_between(_rec("broken", "a" * 40, "f1"), _rec("broken", "a" * 40, "f2"))
    assert other["bytes"] == "not_comparable" and "other compiles (f1 → f2)" in other["why"]
    none = bytes_between(_rec("broken", "a" * 40, None), _rec("broken", "a" * 40, "f2"))
    assert none["bytes"] == "not_comparable" and "the old run recorded no" in none["why"]
    assert bytes_between(_rec("ok", "a" * 40, "f1"), _rec("broken", "b" * 40, "f2")) is None
    assert compile_phrase([_rec("broken", "a", "f1")]).startswith(
        "bytes hold for servers sharing this compile (fingerprint f1 (1 server))")


def _cache(root, code: str) -> str:
    """A vLLM cache as 0.26.0 leaves it, and the log lines that name it."""
    hashed = root / "vllm" / "torch_compile_cache" / "1f4f224191" / "rank_0_0" / "backbone"
    aot = root / "vllm" / "torch_compile_cache" / "torch_aot_compile" / "96099" / "rank_0_0"
    for d in (hashed, aot):
        d.mkdir(parents=True)
    (hashed / "artifact_compile_range_1_8192").write_text(f"{code} loads {root}/inductor/x.so")
    (hashed / "computation_graph.py").write_text("graph")
    (aot / "model").write_text(f"{code} pickled at {root}")   # per compile: left out
    kernel = aot.parent / "inductor_cache" / "ab" / "cab.py"    # a kernel source: counts
    kernel.parent.mkdir(parents=True)
    kernel.write_text(f"# kernel path: {kernel}\n{code}")
    (hashed / "x.lock").write_text(str(root))   # a lock says nothing about the compile
    return (f"INFO [backends.py:1094] Using cache directory: {hashed} for vLLM's torch.compile\n"
            f"INFO [decorators.py:708] saved AOT compiled function to {aot / 'model'}\n")


def test_the_vllm_fingerprint_follows_the_artefacts_not_where_they_live(tmp_path):
    a = compile_fingerprint(_cache(tmp_path / "a", "kernels-1"))
    b = compile_fingerprint(_cache(tmp_path / "b", "kernels-1"))
    c = compile_fingerprint(_cache(tmp_path / "c", "kernels-2"))
    assert a["fingerprint"] and a["fingerprint"] == b["fingerprint"] != c["fingerprint"]
    assert a["files"] == 2 and len(a["dirs"]) == 2
    assert [d.name for d in compile_dirs(_cache(tmp_path / "d", "k"))] == ["1f4f224191", "96099"]
    # a server that loaded the cache names the same folders ("Directly load ...")
    hit = _cache(tmp_path / "e", "kernels-1").replace(
        "saved AOT compiled function to", "Directly load AOT compilation from path")
    assert compile_fingerprint(hit)["fingerprint"] == a["fingerprint"]
    eager = compile_fingerprint("INFO no compile here\n")
    assert eager["fingerprint"] is None and "no torch.compile" in eager["why"]


def test_the_gpu_is_named_as_the_driver_reports_it(monkeypatch):
    rows = gpu_info.parse_query("0, NVIDIA H100 80GB HBM3, GPU-aa, 00000000:18:00.0\n"
                                "1, NVIDIA H100 80GB HBM3, GPU-bb, 00000000:2A:00.0\n")
    monkeypatch.setattr(gpu_info, "gpus", lambda: (rows, None))
    assert gpu_info.gpu_record("1") == [{"index": "1", "model": "NVIDIA H100 80GB HBM3",
                                         "uuid": "GPU-bb", "pci": "00000000:2A:00.0"}]
    assert gpu_info.gpu_record("7")[0] == {"index": "7", "model": None,
                                           "why": "not in nvidia-smi's list"}
    assert gpu_info.gpu_record(None) is None
    monkeypatch.setattr(gpu_info, "gpus", lambda: ({}, "nvidia-smi not found"))
    assert gpu_info.gpu_record("0")[0]["why"] == "nvidia-smi not found"


def _cells(records: list[dict]) -> dict:
    return {(r["residue"], r["phase"]): r for r in records}


def test_lab_compiles_break_with_other_bytes_and_compare_and_gate_honour_it(cli):
    for out, seed in (("a", 1), ("b", 1), ("c", 3)):
        cli.sweep(*RULE, f"--engine-arg=--compile-seed={seed}", lab_model=True, out=out,
                  reports=None, rc=1)
    a, b, c = (_cells(cli.records(o)) for o in "abc")
    fp = {o: {r["server_boot"]["compile"]["fingerprint"] for r in cells.values()}
          for o, cells in zip("abc", (a, b, c))}
    assert fp["a"] == fp["b"] and len(fp["a"]) == 1 and fp["a"] != fp["c"]
    cold = (5, "cold")
    assert a[cold]["verdict"] != "ok" and c[cold]["verdict"] != "ok"
    assert a[cold]["sha1"] == b[cold]["sha1"] != c[cold]["sha1"]   # the bytes follow the compile
    for cell, r in a.items():   # every ok answer is the same under both compiles
        if r["verdict"] == "ok":
            assert c[cell]["verdict"] == "ok" and c[cell]["sha1"] == r["sha1"], cell
    same = compare_records(cli.records("a"), cli.records("b")).as_dict()   # --json's shape
    compared = compare_records(cli.records("a"), cli.records("c"))
    other = compared.as_dict()
    words = {o: {ph: cell.get("bytes", {}).get("bytes")
                 for p in res["configs"][0]["points"] if p["residue"] == 5
                 for ph, cell in p["phases"].items()} for o, res in (("b", same), ("c", other))}
    assert words["b"]["cold"] == "same" and words["c"]["cold"] == "not_comparable"
    assert other["regressed"] == 0 and other["summary"]["still_broken"] >= 1
    md = " ".join(render_compare_markdown(compared).split())
    assert "bytes not comparable: other compiles" in md
    # the gate: still broken is no regression; its section says why the bytes differ
    proc = cli.sweep(*RULE, "--engine-arg=--compile-seed=3", "--baseline",
                     cli.results_file("a"), lab_model=True, out="gated", reports="rep")
    block = cli.manifest("gated")["baseline"]
    assert block["passed"] and not block["regressions"], proc.stderr[-2000:]
    assert any(s["residue"] == 5 and s["phase"] == "cold" and s["bytes"] == "not_comparable"
               for s in block["still_broken"])
    report = " ".join(cli.report("rep").split())
    assert "Still broken (known, not a regression)" in report
    assert "bytes hold for servers sharing this compile (fingerprint " in report
    assert json.dumps(block)   # the manifest's block stays JSON
    # several runs: the legend names each run's compile beside its sha1s
    from harness.publish.compare import render_trend_markdown
    from harness.results import frame
    trend = render_trend_markdown(frame(cli.results_file("a"), cli.results_file("c")))
    assert all(f"`{next(iter(fp[o]))}`" in trend for o in "ac")
    assert "comparable between runs only where the compile column agrees" in trend


def test_a_golden_answer_nobody_judged_is_compared_only_under_its_compile(monkeypatch, tmp_path):
    """``--reference golden:RUN``: an ok golden answer judges every server; an unjudged one
    (``--reference cold``'s cold answers, which a cold break is among) only a server of
    the same compile fingerprint; elsewhere the point falls back to the passage."""
    from types import SimpleNamespace
    from harness.run import golden

    def rec(residue, verdict, text, fp):
        return PhaseRecord.from_dict({"run_id": "g", "config_id": "c", "residue": residue,
                                      "target_len": 1000 + residue, "document_seed": 0,
                                      "phase": "cold", "verdict": verdict, "answer": text,
                                      "server_boot": {"compile": {"fingerprint": fp}}})
    recs = [rec(4, "ok", "the passage", "f1"), rec(5, "unjudged", "a wrong continuation", "f1")]
    monkeypatch.setattr(golden, "resolve_results", lambda ref, out: tmp_path / "x.jsonl")
    monkeypatch.setattr(golden, "read_jsonl_records", lambda path: recs)
    table = golden.load_golden("g", tmp_path)

    def point(residue):
        return SimpleNamespace(residue=residue, document_seed=0,
                               plan=SimpleNamespace(prompt_sha1=None, target_len=1000 + residue))
    assert golden.golden_answer(table, point(4), "f2")["text"] == "the passage"
    assert golden.golden_answer(table, point(5), "f1")["text"] == "a wrong continuation"
    assert golden.golden_answer(table, point(5), "f2") is None
    assert golden.golden_answer(table, point(5), None) is None


def test_records_and_the_manifest_name_the_gpu_of_a_gpu_slot(cli):
    """Every record of a GPU slot, and the manifest, name its GPUs (here the CI box's answer:
    the model nvidia-smi reports, or why there is none)."""
    cli.sweep("--gpus", "1", "--residues", "3", "--spec", "mtp", "--patches", "none", rc=0)
    recs, manifest = cli.records(), cli.manifest()
    gpus, why = gpu_info.gpus()
    for r in recs:
        (g,) = r["server_boot"]["gpu"]
        assert g["index"] == "1" and ("model" in g) and (g["model"] or g["why"])
        assert g == (gpus.get("1") or {"index": "1", "model": None,
                                        "why": why or "not in nvidia-smi's list"})
        assert r["server_boot"]["compile"]["fingerprint"]   # the lab's compile
    assert manifest["gpus"] == {"gpu1": recs[0]["server_boot"]["gpu"]}
