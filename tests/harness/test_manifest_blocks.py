"""The run manifest's blocks typed (``harness/records/manifest_blocks.py``): every committed
manifest's blocks read typed and come back exactly as read, a key a block does not name
survives, the driver writes the same keys and values it wrote as dicts, and no reader in
harness/ indexes a block by key again."""
from __future__ import annotations

import ast
import json
from collections.abc import Mapping
from pathlib import Path

import pytest

from harness.records.gate_block import BaselineBlock
from harness.records.manifest import RunManifest
from harness.records.manifest_blocks import (CaseFacts, ConfigEntry, ExplainRung, ExplainsLink,
                                             ExplainTarget, PromptsBlock, RunBackend, RunFlags,
                                             RunLink)
from harness.records.run_timing import RunPlan, RunTiming
from tests.harness.test_run_manifest import ROOT, committed_manifests

HARNESS = ROOT / "harness"
TYPED = {"options": RunFlags, "backend": RunBackend, "prompts": PromptsBlock,
         "explains": ExplainsLink, "plan": RunPlan, "timing": RunTiming,
         "baseline": BaselineBlock}
BLOCK_CLASSES = (ConfigEntry, RunBackend, CaseFacts, PromptsBlock, RunFlags, RunLink,
                 ExplainRung, ExplainTarget, ExplainsLink)


@pytest.mark.parametrize("path", committed_manifests(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_committed_manifests_blocks_read_typed_and_come_back_as_read(path: Path):
    d = json.loads(path.read_text())
    m = RunManifest.from_dict(d)
    for key, cls in TYPED.items():
        if isinstance(d.get(key), Mapping):
            block = getattr(m, key)
            assert isinstance(block, cls), key
            assert block.as_dict() == d[key] and list(block.as_dict()) == list(d[key]), key
    if isinstance(d.get("configs"), list):
        assert all(isinstance(c, ConfigEntry) for c in m.configs)
        assert [c.as_dict() for c in m.configs] == d["configs"]
    if isinstance(d.get("explains"), Mapping):
        assert all(isinstance(t, ExplainTarget) for t in m.explains.targets)
        assert m.link("explains") is m.explains and m.explained_run == d["explains"]["run_id"]
    back = m.as_dict()
    assert back == d and list(back) == list(d)
    assert json.dumps(back, sort_keys=True) == json.dumps(d, sort_keys=True)


def test_a_key_a_block_does_not_name_survives_at_every_depth():
    d = {"run_id": "e", "odd_link": {"run_id": "p", "why": "a benchmark's"},
         "options": {"flags": {"residues": "3"}, "version": 1, "note": "x"},
         "configs": [{"config": {"k": 3}, "config_id": "c1", "config_label": "k=3", "more": 1}],
         "backend": {"backend": "ray", "nodes": 2, "slots": 4, "ray_version": "2.9"},
         "prompts": {"file": "p.jsonl", "cases": {"a": {"line": 3, "digest": "d", "new": 1}},
                     "v": 2},
         "explains": {"run_id": "p", "targets": [{"residue": 5, "rungs": [
             {"label": "none", "axis": "none", "config_id": "c1", "extra_key": [1]}],
             "later": True}], "results": "p.jsonl", "more": {}}}
    m = RunManifest.from_dict(d)
    assert m.as_dict() == d and json.dumps(m.as_dict()) == json.dumps(d)
    assert m.options.extra == {"note": "x"} and m.options.flags == {"residues": "3"}
    assert m.configs[0].extra == {"more": 1} and m.configs[0].config_label == "k=3"
    assert (m.backend.backend, m.backend.slots, m.backend.nodes, m.backend.extra) == (
        "ray", 4, 2, {})
    assert RunBackend.from_dict({"backend": "x", "new": 1}).extra == {"new": 1}
    assert m.prompts.cases["a"].extra == {"new": 1} and m.prompts.extra == {"v": 2}
    (target,) = m.explains.targets
    assert target.extra == {"later": True} and target.document is None
    assert target.rungs[0].extra == {"extra_key": [1]} and target.rungs[0].note is None
    assert m.link("odd_link") == RunLink.from_dict(d["odd_link"])
    assert m.link("odd_link").extra == {"why": "a benchmark's"}


def test_a_block_that_is_not_an_object_is_kept_as_read():
    d = {"run_id": "f", "options": None, "backend": "local", "explains": ["p"],
         "configs": [{"config_id": "c"}, "not a config"], "prompts": {"cases": {"a": 1}}}
    m = RunManifest.from_dict(d)
    assert (m.backend, m.explains, m.configs) == ("local", ["p"], d["configs"])
    assert m.prompts.cases == {"a": 1} and m.link("explains") is None
    assert m.explained_run is None and m.as_dict() == d


def test_a_new_block_writes_its_keys_in_order_and_an_empty_one_is_empty():
    rung = ExplainRung(label="graph mode → eager", axis="graph mode", note="no change")
    assert list(rung.as_dict()) == ["label", "axis", "note"]
    target = ExplainTarget(config_id="c", config_label="k", residue=5, document=0,
                           phases={"cold": "broken"}, rungs=(rung,))
    assert list(target.as_dict()) == ["config_id", "config_label", "residue", "document",
                                      "phases", "rungs"]        # case_id only when set
    assert target.as_dict()["rungs"] == [rung.as_dict()]
    assert RunBackend(backend="local").as_dict() == {"backend": "local"}
    assert not RunManifest.from_dict({"explains": {}}).explains   # as empty as {} was
    assert RunManifest.from_dict({"explains": {"run_id": "p"}}).explains


def test_the_blocks_are_not_mappings():
    """A reader cannot index a block by key: it names its attributes."""
    for cls in BLOCK_CLASSES:
        block = cls()
        assert not isinstance(block, Mapping), cls
        assert not any(hasattr(block, a) for a in ("get", "__getitem__", "keys")), cls
        with pytest.raises(TypeError):
            block["run_id"]   # noqa: B018


def test_the_driver_writes_the_blocks_it_wrote_as_dicts(tmp_path: Path):
    from harness.command.cli import build_options, sweep_parser
    from harness.records.store import ResultStore
    from harness.run.driver import Driver
    from harness.run.plan import plan_points
    from harness.serve.engines import make_adapter
    from harness.settings.configs import config_id

    argv = ["--residues", "3,4", "--phases", "cold"]
    opts = build_options(sweep_parser().parse_args(argv), argv)
    adapter = make_adapter(opts.serving.engine, opts.serving.server_cmd)
    store = ResultStore(tmp_path, "run-b")
    explains = {"run_id": "parent", "results": "p.jsonl", "documents": [0],
                "targets": [{"config_id": "c", "config_label": "k", "residue": 3,
                             "document": 0, "phases": {"cold": "broken"},
                             "rungs": [{"label": "none", "axis": "none", "config_id": "c",
                                        "config_label": "k"}]}]}
    other = {"run_id": "gold", "why": "golden"}
    driver = Driver(opts, adapter, store, plan_points(opts, adapter),
                    links={"explains": explains, "golden": other})
    driver.start()
    on_disk = json.loads(store.manifest_path.read_text())
    as_dicts = [{"config_id": config_id(c), "config_label": c.label(), "config": c.as_dict()}
                for c in opts.serving.configs]   # what the driver wrote before the blocks were typed
    assert on_disk["configs"] == json.loads(json.dumps(as_dicts, default=str))
    assert on_disk["options"] == opts.flags and "prompts" not in on_disk
    assert on_disk["explains"] == explains and on_disk["golden"] == other
    assert isinstance(driver.manifest.explains, ExplainsLink)
    assert driver.manifest.link("golden").run_id == "gold"
    driver.finish(wall=1.0, interrupted=False, backend={"backend": "local", "slots": 1})
    back = store.read_manifest()
    assert isinstance(back.backend, RunBackend)
    assert json.loads(store.manifest_path.read_text())["backend"] == {"backend": "local",
                                                                      "slots": 1}


# -- no reader indexes a block by key ---------------------------------------------------
BLOCK_ATTRS = ("configs", "backend", "prompts", "explains", "options")
BLOCK_CALLS = ("link", "explains_of")


def _is_block(node: ast.AST, names: set[str]) -> bool:
    """A manifest block: ``x.<block>``, ``x.link(...)``, ``explains_of(...)``, a name bound
    to one, or ``<one> or {}``."""
    if isinstance(node, ast.BoolOp):
        return _is_block(node.values[0], names)
    if isinstance(node, ast.Attribute):
        return node.attr in BLOCK_ATTRS
    if isinstance(node, ast.Call):
        f = node.func
        return (isinstance(f, ast.Attribute) and f.attr in BLOCK_CALLS) or (
            isinstance(f, ast.Name) and f.id in BLOCK_CALLS)
    return isinstance(node, ast.Name) and node.id in names


def _keyed(node: ast.AST, names: set[str]) -> ast.AST | None:
    """The block ``node`` indexes by a string key (``b["k"]``, ``b.get("k")``, ``"k" in b``)."""
    if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant) \
            and isinstance(node.slice.value, str):
        return node.value if _is_block(node.value, names) else None
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
            and node.func.attr in ("get", "pop", "setdefault", "keys", "items", "values"):
        return node.func.value if _is_block(node.func.value, names) else None
    if isinstance(node, ast.Compare) and any(isinstance(o, (ast.In, ast.NotIn)) for o in node.ops):
        return next((c for c in node.comparators if _is_block(c, names)), None)
    return None


def keyed_block_reads(tree: ast.AST) -> list[int]:
    """Lines of ``tree`` where a manifest block is read by key, in each function the names
    bound to a block counted too (``block = m.explains or {}``)."""
    found = []
    for fn in [tree, *(n for n in ast.walk(tree)
                       if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)))]:
        names = {t.id for n in ast.walk(fn) if isinstance(n, ast.Assign) and _is_block(
            n.value, set()) for t in n.targets if isinstance(t, ast.Name)}
        found += [n.lineno for n in ast.walk(fn) if _keyed(n, names) is not None]
    return sorted(set(found))


def test_the_check_finds_a_keyed_read():
    """The check below would find the reads this issue replaced."""
    before = '''
def f(manifest, m):
    parent = manifest.explains.get("run_id")
    prompts = m.prompts or {}
    facts = prompts.get("cases")
    block = m.link("explains")
    ok = "targets" in block and m.options["flags"]
    return opts.configs[0], manifest.explains.run_id
'''
    assert keyed_block_reads(ast.parse(before)) == [3, 5, 7]


def test_no_reader_indexes_a_manifest_block_by_key():
    found = [f"{p.relative_to(ROOT)}:{line}" for p in sorted(HARNESS.rglob("*.py"))
             if p.name != "manifest_blocks.py"
             for line in keyed_block_reads(ast.parse(p.read_text()))]
    assert not found, f"a manifest block read by key (name its attribute): {found}"
