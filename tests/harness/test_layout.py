"""The rules of docs/architecture.md, checked over the source's AST: each rule that page
states names its test here, and each test here is a rule stated there
(``test_the_architecture_page_states_what_this_file_checks``)."""
from __future__ import annotations

import ast
import re
from pathlib import Path

from harness.settings.sweep_options import FIELD_PART

ROOT = Path(__file__).resolve().parents[2]
HARNESS = ROOT / "harness"
MAX_LINES = 450
MAX_FUNCTION_LINES = 60   # a function, from its def to its last line, docstring included


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports_of(path: Path) -> set[str]:
    """harness modules ``path`` imports (at any depth of the file: lazy imports count)."""
    mod = module_name(path)
    package = mod if path.name == "__init__.py" else mod.rsplit(".", 1)[0]
    out: set[str] = set()
    tree = ast.parse(path.read_text())
    for block in ast.walk(tree):  # `if TYPE_CHECKING:` imports are for types only
        if isinstance(block, ast.If) and getattr(block.test, "id", "") == "TYPE_CHECKING":
            block.body = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name.startswith("harness")}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if not target.startswith("harness"):
                continue
            out.add(target)
            for a in node.names:  # `from . import bugb` imports a module
                if (HARNESS.parent / (target + "." + a.name).replace(".", "/")).with_suffix(
                        ".py").exists():
                    out.add(f"{target}.{a.name}")
    return out - {mod}


def graph() -> dict[str, set[str]]:
    files = {module_name(p): p for p in HARNESS.rglob("*.py")}
    return {m: {i for i in imports_of(p) if i in files} for m, p in files.items()}


def _cycle(g: dict[str, set[str]]) -> list[str] | None:
    """One cycle of the graph ``g`` (its nodes in order, the first again at the end)."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(m: str) -> list[str] | None:
        state[m] = 1
        stack.append(m)
        for n in sorted(g.get(m, ())):
            if state.get(n) == 1:
                return stack[stack.index(n):] + [n]
            if n not in state and (found := visit(n)):
                return found
        stack.pop()
        state[m] = 2
        return None

    for m in sorted(g):
        if m not in state and (found := visit(m)):
            return found
    return None


def test_no_import_cycle_inside_harness():
    cycle = _cycle(graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def room_of(module: str) -> str:
    """The room a module stands in: its sub-package of ``harness/`` (``harness.run``), or
    the module itself when it sits in ``harness/`` (``harness.residue_sweep``)."""
    return ".".join(module.split(".")[:2])


def test_no_circle_between_rooms():
    """Rooms by role: a sub-package of ``harness/`` (or a module of ``harness/`` itself) is
    one room, and no room imports, through any of its modules, a room that imports it back
    (``harness/__init__.py``, the package's face, aside: it names nothing statically)."""
    rooms: dict[str, set[str]] = {}
    for m, deps in graph().items():
        if m != "harness":
            rooms.setdefault(room_of(m), set()).update(
                room_of(d) for d in deps if d != "harness" and room_of(d) != room_of(m))
    cycle = _cycle(rooms)
    assert cycle is None, "rooms in a circle: " + " -> ".join(cycle or [])
    assert {"harness.serve", "harness.judge", "harness.run", "harness.report"} <= set(rooms)
    # the map lists the rooms from the top: each imports only rooms listed below it
    order = [e[len("harness/"):].removesuffix("/").removesuffix(".py") for e in _layers()
             if e.startswith("harness/") and e.count("/") == 1 + e.endswith("/")
             and e != "harness/"]
    at = {f"harness.{name}": i for i, name in enumerate(order)}
    up = [f"{r} -> {d}" for r, deps in rooms.items() for d in deps
          if r in at and d in at and at[d] < at[r]]
    assert not up, f"a room imports one the map lists above it: {up}"
    assert set(rooms) - {"harness.__main__"} <= set(at), f"not on the map: {set(rooms) - set(at)}"


def test_run_layer_never_imports_a_backend():
    g = graph()
    for m, deps in g.items():
        if m.startswith("harness.run"):
            assert not {d for d in deps if d.startswith("harness.backends")}, m


def test_the_names_are_leaves():
    """``names/*`` imports nothing of the harness outside ``names/`` (the package's rule,
    its ``__init__`` docstring): a module that needs a verdict's, a phase's, an isolation's
    or an engine's name gets it without the machinery. So ``judge/`` imports nothing of
    ``serve/``, and the Bug B rule and the report's opening lines take ``EngineName``
    without the adapter registry; ``records/recordkeys.py`` reads ``IsolationName`` there."""
    g = graph()
    names = {m for m in g if m.startswith("harness.names")}
    assert {"harness.names.verdict", "harness.names.phase", "harness.names.isolation",
            "harness.names.engine"} <= names
    found = [f"{m} -> {d}" for m in names for d in g[m]
             if d.startswith("harness") and not d.startswith("harness.names")]
    found += [f"{m} -> {d}" for m, deps in g.items() if m.startswith("harness.judge")
              for d in deps if d.startswith("harness.serve")]
    found += [f"{m} -> {d}" for m in ("harness.judge.bugb", "harness.report.engine_notice",
                                      "harness.records.recordkeys")
              for d in g[m] if d in ("harness.serve.engines", "harness.serve.isolation")]
    assert not found, found


def test_reports_compare_and_gate_read_records_not_the_run_runtime():
    """The record model is in ``records/``: the report, publish/ and results.py read it
    there and import nothing of the run layer."""
    g = graph()
    for m, deps in g.items():
        if m.startswith(("harness.report", "harness.publish", "harness.results")):
            used = {d for d in deps if d.startswith("harness.run")}
            assert not used, (m, used)
            assert "harness.report" not in deps or m.startswith("harness.report"), m


def test_no_report_room_imports_the_renderer_of_another():
    """Of the rooms that read records, ``publish/`` and ``results.py`` import no module of
    ``report/`` (the markdown renderer), ``results.py`` none of ``publish/``, and ``report/``
    takes of ``publish/`` only how a file is written (``outfile``) and the gate block's lines
    (``gate.gate_lines``, said on the terminal as in the report)."""
    g = graph()
    rooms = ("harness.report", "harness.publish", "harness.results")
    found = [f"{m} -> {d}" for m, deps in g.items() if m.startswith(rooms[1:])
             for d in deps if d.startswith("harness.report")]
    found += [f"{m} -> {d}" for m, deps in g.items() if m.startswith("harness.results")
              for d in deps if d.startswith("harness.publish")]
    taken = {"harness.publish.outfile": {"write_output"}, "harness.publish.gate": {"gate_lines"}}
    for p in (HARNESS / "report").rglob("*.py"):
        package = module_name(p).rsplit(".", 1)[0]
        for n in ast.walk(ast.parse(p.read_text())):
            if isinstance(n, ast.Import):
                found += [f"{module_name(p)} -> {a.name}" for a in n.names
                          if a.name.startswith("harness.publish")]
            if not isinstance(n, ast.ImportFrom):
                continue
            base = package.split(".")[:len(package.split(".")) - n.level + 1] if n.level else []
            module = ".".join(base + ([n.module] if n.module else []))
            found += [f"{module_name(p)} -> {module}.{a.name}" for a in n.names
                      if module.startswith("harness.publish")
                      and a.name not in taken.get(module, ())]
    assert not found, found


def test_serve_imports_nothing_of_the_harness_but_errors_and_names():
    """``serve/`` (servers and engines) stands on ``errors.py`` and ``names/`` alone: what a
    server needs of the sweep comes in as values, never as an import of its rooms."""
    g = graph()
    assert "harness.serve.engines" in g
    found = [f"{m} -> {d}" for m, deps in g.items() if m.startswith("harness.serve")
             for d in deps if not d.startswith(("harness.serve", "harness.names",
                                                "harness.errors"))]
    assert not found, found


# what runs things: a process, a socket, a thread, an event loop, a request
_MACHINERY = {"asyncio", "subprocess", "socket", "threading", "multiprocessing", "signal",
              "httpx", "concurrent", "selectors"}


def test_records_hold_no_machinery():
    """``records/`` is the record model and the results file: it imports nothing of the
    harness but ``errors.py``, ``names/`` and itself, and nothing that runs something
    (``_MACHINERY``: a process, a socket, a thread, an event loop, a request)."""
    g = graph()
    assert "harness.records.store" in g
    found = [f"{m} -> {d}" for m, deps in g.items() if m.startswith("harness.records")
             for d in deps if not d.startswith(("harness.records", "harness.names",
                                                "harness.errors"))]
    for p in (HARNESS / "records").rglob("*.py"):
        for n in ast.walk(ast.parse(p.read_text())):
            names = ([a.name for a in n.names] if isinstance(n, ast.Import)
                     else [n.module or ""] if isinstance(n, ast.ImportFrom) and not n.level
                     else [])
            found += [f"{p.name} -> {x}" for x in names if x.split(".")[0] in _MACHINERY]
    assert not found, found


def test_the_backend_registry_imports_nothing():
    """``settings/backend_registry.py`` names the backends as strings and imports nothing
    (``from __future__`` aside), so the flag table reads ``--backend``'s choices without
    reaching a backend, the protocol or the run layer."""
    tree = ast.parse((HARNESS / "settings/backend_registry.py").read_text())
    found = [ast.unparse(n) for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom))
             and not (isinstance(n, ast.ImportFrom) and n.module == "__future__")]
    assert not found, found


def test_no_source_file_over_the_limit():
    long = {str(p.relative_to(ROOT)): n for root in (HARNESS, ROOT / "engine")
            for p in root.rglob("*.py") if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert not long, long


def _long_functions(source: str, limit: int) -> list[tuple[str, int]]:
    return [(n.name, n.end_lineno - n.lineno + 1) for n in ast.walk(ast.parse(source))
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
            and n.end_lineno - n.lineno + 1 > limit]


def test_no_function_over_the_limit():
    """Functions (methods and nested ones too) of harness/ and engine/ stay under
    ``MAX_FUNCTION_LINES``: a longer one is split by step, each step a function named for it."""
    sample = "def f():\n" + "    x = 1\n" * 60 + "def g():\n    pass\n"
    assert _long_functions(sample, MAX_FUNCTION_LINES) == [("f", 61)]   # the check sees one
    long = {f"{p.relative_to(ROOT)}::{name}": n for root in (HARNESS, ROOT / "engine")
            for p in root.rglob("*.py")
            for name, n in _long_functions(p.read_text(), MAX_FUNCTION_LINES)}
    assert not long, long


def test_the_graph_sees_relative_imports():
    # guards the checker itself: a known edge must be found
    assert "harness.run.driver" in graph()["harness.backends.local"]
    assert "harness.judge.bugb" in graph()["harness.settings.configs"]


def _string_groups(path: Path):
    """(line, set of string constants) of every set / tuple / list literal in ``path``."""
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, (ast.Set, ast.Tuple, ast.List)):
            yield node.lineno, {e.value for e in node.elts
                                if isinstance(e, ast.Constant) and isinstance(e.value, str)}


def test_verdict_and_isolation_groups_are_declared_once():
    """A group of verdicts (judged, untested, bugs, ...) is a column of
    ``names/verdict.VERDICT_TABLE``, and what an isolation is its
    ``names/isolation.POLICIES`` entry: no other module spells a group of them again."""
    from harness.names.isolation import ISOLATIONS
    from harness.names.verdict import VERDICTS
    homes = {HARNESS / "names/verdict.py", HARNESS / "names/isolation.py"}
    found = []
    for p in HARNESS.rglob("*.py"):
        if p in homes:
            continue
        for line, names in _string_groups(p):
            if len(names & set(VERDICTS)) >= 2 or len(names & set(ISOLATIONS)) >= 2:
                found.append(f"{p.relative_to(ROOT)}:{line} {sorted(names)}")
    assert not found, found


def test_the_vocabulary_groups_are_the_tables_columns():
    """The groups the gate, bisect, explain and the matrix reference ask are read off
    the table (and an isolation value has exactly one policy; what a value does to a
    server, ``serve/isolation.MACHINERY``, is only for a value the policies name)."""
    from harness.publish import bisect, gate
    from harness.names import isolation
    from harness.names import verdict as v
    from harness.report import explained
    from harness.run import matrix_reference
    from harness.serve.isolation import MACHINERY
    assert gate.JUDGED is v.JUDGED and bisect.UNTESTED is v.UNTESTED
    assert explained.EXPLAINED is v.EXPLAINED and matrix_reference.OPEN is v.OPEN
    assert v.VERDICTS == tuple(row.name for row in v.VERDICT_TABLE)
    assert set(isolation.ISOLATIONS) == set(isolation.POLICIES) >= set(MACHINERY)
    for name, pol in isolation.POLICIES.items():
        assert pol.name == name and set(pol.passes) <= set(isolation.RECORD_ISOLATIONS)


def test_exit_codes_are_declared_in_errors_only():
    """Exit codes live in ``harness.errors`` (``ExitCode``, ``BisectExit``, ``PostExit``);
    a module's ``EXIT_*`` names are aliases of them, never new numbers."""
    found = []
    for p in HARNESS.rglob("*.py"):
        if p == HARNESS / "errors.py":
            continue
        for node in ast.walk(ast.parse(p.read_text())):
            if not isinstance(node, ast.Assign):
                continue
            names = [t for tgt in node.targets
                     for t in (tgt.elts if isinstance(tgt, ast.Tuple) else [tgt])]
            values = node.value.elts if isinstance(node.value, ast.Tuple) else [node.value]
            for t, val in zip(names, values):
                if (isinstance(t, ast.Name) and t.id.startswith("EXIT")
                        and isinstance(val, ast.Constant)):
                    found.append(f"{p.relative_to(ROOT)}:{node.lineno} {t.id} = {val.value}")
    assert not found, found


def _imports_named(path: Path) -> list[tuple[str, str]]:
    """(module, name) of every ``from module import name`` in ``path``, at any depth."""
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            out += [(node.module, a.name) for a in node.names]
        elif isinstance(node, ast.Import):
            out += [(a.name, "") for a in node.names]
    return out


def test_engine_never_imports_harness():
    """The engine side (the lab, the vLLM presets and plugin, the tiny models' tools) is
    below the harness: what both need is a leaf in engine/ (``engine.prompts``,
    ``engine.poison_pattern``), at any depth of a file (lazy imports count)."""
    engine = ROOT / "engine"
    found = [f"{p.relative_to(ROOT)}: {m}" for p in engine.rglob("*.py")
             for m, _ in _imports_named(p) if m == "harness" or m.startswith("harness.")]
    assert not found, found


def test_the_run_layer_reads_engine_facts_through_the_adapter():
    """The Driver and the point runner ask the engine adapter (boot notes, boot stages,
    first-request latency), never an engine's own parsers."""
    found = [f"{p.relative_to(ROOT)}: {m}" for p in (HARNESS / "run").rglob("*.py")
             for m, _ in _imports_named(p) if m.startswith("engine.vllm")]
    assert not found, found


def test_backends_use_the_drivers_api_not_its_store():
    """A backend reports points to the driver and asks it for what it needs
    (``logs_dir``, ``point_runner``); it never writes or reads the results store."""
    found = []
    for p in (HARNESS / "backends").rglob("*.py"):
        for node in ast.walk(ast.parse(p.read_text())):
            if (isinstance(node, ast.Attribute) and node.attr == "store"
                    and isinstance(node.value, (ast.Name, ast.Attribute))
                    and "driver" in ast.unparse(node.value)):
                found.append(f"{p.relative_to(ROOT)}:{node.lineno} {ast.unparse(node)}")
    assert not found, found


def _calls_in(path: Path, function: str) -> set[str]:
    """The names ``function`` of ``path`` calls (``f(...)``, ``x.f(...)``)."""
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.FunctionDef) and node.name == function:
            return {(c.func.attr if isinstance(c.func, ast.Attribute) else getattr(c.func, "id", ""))
                    for c in ast.walk(node) if isinstance(c, ast.Call)}
    raise AssertionError(f"{path.relative_to(ROOT)} defines no {function}")


def test_the_terminal_table_is_the_reports_rows_as_plain_text():
    """The results table is built once, of ``text/phrase.Phrase`` cells
    (``report/sections.results_rows``); the markdown report renders their markdown, the
    terminal their plain text: ``text/plaintext.align_table`` pads plain cells and strips
    no markdown, and no function of ``report/terminal.py`` that takes the rows makes
    markdown plain again."""
    sections = ast.parse((HARNESS / "report" / "sections.py").read_text())
    rows = next(n for n in ast.walk(sections)
                if isinstance(n, ast.FunctionDef) and n.name == "results_rows")
    assert "Phrase" in ast.unparse(rows.returns)
    assert "inline_to_plain" not in _calls_in(HARNESS / "text" / "plaintext.py", "align_table")
    terminal = HARNESS / "report" / "terminal.py"
    takers = [n.name for n in ast.walk(ast.parse(terminal.read_text()))
              if isinstance(n, ast.FunctionDef) and "results_rows" in _calls_in(terminal, n.name)]
    assert takers, "the terminal's table is not the report's rows"
    assert not [f for f in takers if "inline_to_plain" in _calls_in(terminal, f)], takers


# Where an argparse parser reads a command line: the verbs (command/), the sweep verb's one
# parse (settings/flag_manifest.parse_flags), and the `python -m` entry points of two tools;
# serve_line reads a --serve server line with vLLM's (or the lab's) own parser, not argv.
_PARSERS = {"command/cli.py", "explain/cli.py", "settings/flag_manifest.py",
            "run/record_doc.py", "publish/github_rest.py", "serve/serve_line.py"}


def test_argv_is_parsed_where_the_map_says():
    """A command line is parsed in the command room, the sweep verb's flags once by
    ``settings/flag_manifest.parse_flags``, and nowhere else (the tools' own ``main``
    and the ``--serve`` line aside)."""
    found = set()
    for p in HARNESS.rglob("*.py"):
        for node in ast.walk(ast.parse(p.read_text())):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr in ("parse_args", "parse_known_args", "parse_intermixed_args")):
                found.add(str(p.relative_to(HARNESS)))
    assert found == _PARSERS, found ^ _PARSERS


_STORE_WRITES = {"rewrite", "write_manifest", "prune_partial", "_replace_records"}


def test_the_driver_is_the_only_writer():
    """Only ``run/driver.py`` writes a run's results file and manifest (records appended,
    pruned on ``--resume``, rewritten by a matrix reference's judging): no other module
    calls the store's writing methods (the store's own module aside)."""
    found = []
    for p in HARNESS.rglob("*.py"):
        if p in (HARNESS / "run" / "driver.py", HARNESS / "records" / "store.py"):
            continue
        for node in ast.walk(ast.parse(p.read_text())):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
                continue
            receiver = ast.unparse(node.func.value)
            if node.func.attr in _STORE_WRITES or (node.func.attr == "append"
                                                   and "store" in receiver.lower()):
                found.append(f"{p.relative_to(ROOT)}:{node.lineno} {ast.unparse(node.func)}")
    assert not found, found


# The modules a record passes through from where it is built to where it is written and
# handed to the caller: each passes ``records.phase_record.PhaseRecord``s, never a dict.
_RECORD_PATH = ("run/record_builder.py", "run/point.py", "run/driver.py", "run/auto.py",
                "run/matrix_reference.py", "backends/local.py", "backends/live.py",
                "backends/ray.py", "backends/ray_task.py", "residue_sweep.py",
                "command/cli.py", "explain/cli.py", "publish/writers.py")
_RECORD_NAMES = {"record", "records", "rec", "recs"}
# The public entry points that take records as a caller gives them (``RecordsIn``: read from
# a file, built by a test or a script, or typed already) and type them; every reader behind
# them takes ``PhaseRecord``s. docs/architecture.md names exactly these.
_ENTRY_POINTS = {
    "report/render.py": {"render_markdown", "write_report"},
    "report/terminal.py": {"render_terminal"},
    "publish/compare.py": {"compare_records"},
    "publish/gate.py": {"gate_block", "gate_exit_code", "write_junit"},
    "results.py": {"frame"},
}
# Where records as read (dicts) become PhaseRecords (``typed``, ``PhaseRecord.from_dict``):
# the model itself, the typed readers of the store, Ray's process boundary and the entry
# points above.
_TYPED_AT = {
    "records/phase_record.py": {"as_record", "typed", "replaced"},
    "records/store.py": {"read_jsonl_records", "read_phase_records"},
    "backends/ray.py": {"_write"},
    **_ENTRY_POINTS,
}


def _calls_by_function(tree: ast.AST):
    """(enclosing function name, call node) for every call of ``tree``."""
    def visit(node, fn):
        for child in ast.iter_child_nodes(node):
            name = child.name if isinstance(child, (ast.FunctionDef,
                                                    ast.AsyncFunctionDef)) else fn
            if isinstance(child, ast.Call):
                yield fn, child
            yield from visit(child, name)
    yield from visit(tree, "<module>")


def test_records_travel_as_phase_records():
    """One record shape from the point runner to the writers: the run layer, the backends
    and the driver build and pass ``PhaseRecord``s (a record parameter or field of theirs
    is annotated ``PhaseRecord``; ``RecordBuilder`` returns them and never a record's
    ``as_dict()``); only the store writes ``as_dict()`` (and Ray's task, to cross its
    process boundary); ``typed`` / ``PhaseRecord.from_dict`` turn dicts into records only
    at the places ``_TYPED_AT`` names."""
    found = []
    for rel in _RECORD_PATH:
        tree = ast.parse((HARNESS / rel).read_text())
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                args = node.args.args + node.args.kwonlyargs
                found += [f"{rel}:{node.lineno} {node.name}({a.arg}: {ast.unparse(a.annotation)})"
                          for a in args if a.arg in _RECORD_NAMES and a.annotation
                          and not re.search(r"\bPhaseRecord\b|logging\.LogRecord",
                                            ast.unparse(a.annotation))]
            elif isinstance(node, ast.ClassDef) and node.name == "RecordBuilder":
                # every method but ``base`` (the fields a point's records share) is a record
                found += [f"{rel}:{m.lineno} RecordBuilder.{m.name} returns no PhaseRecord"
                          for m in node.body if isinstance(m, ast.FunctionDef)
                          and m.name != "base" and "PhaseRecord" not in ast.unparse(
                              m.returns or ast.Constant(""))]
            elif (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)
                  and node.target.id in _RECORD_NAMES
                  and "PhaseRecord" not in ast.unparse(node.annotation)):
                found.append(f"{rel}:{node.lineno} {ast.unparse(node)}")
            elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                  and node.func.attr == "as_dict" and rel != "backends/ray_task.py"
                  and (isinstance(node.func.value, ast.Call) or ast.unparse(node.func.value)
                       in _RECORD_NAMES | {"r"})):
                found.append(f"{rel}:{node.lineno} {ast.unparse(node)}")
    for p in HARNESS.rglob("*.py"):
        rel = str(p.relative_to(HARNESS))
        for fn, call in _calls_by_function(ast.parse(p.read_text())):
            if (ast.unparse(call.func) in ("typed", "PhaseRecord.from_dict")
                    and fn not in _TYPED_AT.get(rel, ())):
                found.append(f"{rel}:{call.lineno} {fn} calls {ast.unparse(call.func)}")
    assert not found, found


def _takes_records_in() -> dict[str, set[str]]:
    """The functions of ``harness/`` (outside the record model) with a parameter annotated
    ``RecordsIn`` (records as a caller gives them), by module."""
    out: dict[str, set[str]] = {}
    for p in HARNESS.rglob("*.py"):
        rel = str(p.relative_to(HARNESS))
        for n in ast.walk(ast.parse(p.read_text())):
            if (isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
                    and rel != "records/phase_record.py"
                    and any(a.annotation is not None
                            and re.search(r"\bRecordsIn\b", ast.unparse(a.annotation))
                            for a in n.args.args + n.args.kwonlyargs)):
                out.setdefault(rel, set()).add(n.name)
    return out


def test_records_are_typed_at_the_public_entry_points_alone():
    """Only the public entry points (``_ENTRY_POINTS``) take records as a caller gives
    them (``RecordsIn``), and each does; every other reader's records are ``PhaseRecord``s
    (no union of dict and record), and docs/architecture.md names exactly these entry
    points."""
    assert _takes_records_in() == _ENTRY_POINTS
    unions = [f"{p.relative_to(HARNESS)}:{n.lineno} {n.name}({a.arg})"
              for p in HARNESS.rglob("*.py") if p.name != "phase_record.py"
              for n in ast.walk(ast.parse(p.read_text()))
              if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
              for a in n.args.args + n.args.kwonlyargs
              if a.arg in _RECORD_NAMES | {"r", "old", "new", "baseline", "extra"}
              and a.annotation is not None
              and re.search(r"\bPhaseRecord\b", ast.unparse(a.annotation))
              and re.search(r"\b(dict|Mapping)\b", ast.unparse(a.annotation))]
    assert not unions, unions
    listed = ARCH.read_text().split("phase_record.RecordsIn`:", 1)[1].split(")", 1)[0]
    named = set(re.findall(r"`(?:[\w/]+\.)?(\w+)`", listed))
    assert named == set().union(*_ENTRY_POINTS.values()), named


def _named_by_function(tree: ast.AST, name: str):
    """(enclosing function name, node) for every place ``tree`` names ``name``: a name, an
    attribute, an import of it."""
    def visit(node, fn):
        for child in ast.iter_child_nodes(node):
            inner = child.name if isinstance(child, (ast.FunctionDef,
                                                     ast.AsyncFunctionDef)) else fn
            if ((isinstance(child, ast.Name) and child.id == name)
                    or (isinstance(child, ast.Attribute) and child.attr == name)
                    or (isinstance(child, ast.alias) and child.name == name)):
                yield fn, child
            yield from visit(child, inner)
    yield from visit(tree, "<module>")


def _calls_of(path: Path) -> list[tuple[str, str]]:
    """(enclosing function, called name) of every call in ``path``."""
    return [(fn, ast.unparse(c.func).rsplit(".", 1)[-1])
            for fn, c in _calls_by_function(ast.parse(path.read_text()))]


def test_each_decision_is_made_once():
    """The gate's verdict against a baseline is ``gate.gate_block``'s ``passed``, decided
    there (``gate_exit_code`` reads it); a ``--baseline`` run reads the baseline once (as
    its options are built, ``Asked.baseline_records``; the session's check only for options
    built without it) and compares with it once (``gate_block``); the reference-cell rule is
    ``recordkeys.reference_cells``, which the gate, bisect and the report ask; a
    configuration's residues are ``settings/configs.choose_residues``' (the options'
    check, ``--url``, explain's rungs, the plan and the dry run ask it)."""
    sweep = _calls_of(HARNESS / "residue_sweep.py")
    assert [fn for fn, name in sweep if name == "load_records"] == ["check"]
    assert [fn for fn, name in _calls_of(HARNESS / "settings" / "asked.py")
            if name == "load_records"] == ["baseline_records"]
    assert "load_records" not in {name for _, name in _calls_of(HARNESS / "settings" / "flag_facts.py")}
    assert [fn for fn, name in sweep if name == "gate_block"] == ["_finish"]
    assert not [c for c in sweep if c[1] in ("compare_records", "find_regressions",
                                             "find_coverage_losses")]
    exits = [c for _, c in _calls_by_function(ast.parse((HARNESS / "residue_sweep.py")
                                                        .read_text()))
             if ast.unparse(c.func).endswith("gate_exit_code")]
    assert exits and all([k.arg for k in c.keywords] == ["block"] for c in exits)
    gate = _calls_of(HARNESS / "publish/gate.py")
    assert sorted(fn for fn, name in gate if name == "compare_records") == [
        "find_coverage_losses", "find_regressions", "gate_block"]
    tree = ast.parse((HARNESS / "publish/gate.py").read_text())
    deciders = {fn for fn, c in _calls_by_function(tree) if isinstance(c, ast.Call)
                and ast.unparse(c.func) == "BaselineBlock"}
    assert deciders == {"gate_block"}
    exit_code = next(n for n in tree.body if isinstance(n, ast.FunctionDef)
                     and n.name == "gate_exit_code")
    assert "block.passed" in ast.unparse(exit_code)
    assert not any(name in ("find_regressions", "find_coverage_losses") for _, name in
                   ((fn, n) for fn, n in gate if fn == "gate_exit_code"))
    for rel in ("publish/gate.py", "publish/bisect.py", "report/render.py"):
        assert "reference_cells" in {name for _, name in _calls_of(HARNESS / rel)}, rel
    assert not [p for p in HARNESS.rglob("*.py") if p.name != "recordkeys.py"
                and any(isinstance(n, ast.FunctionDef) and n.name == "reference_cells"
                        for n in ast.walk(ast.parse(p.read_text())))]
    # the residues of a configuration: settings/configs.choose_residues, for every asker
    selects = [f"{p.relative_to(HARNESS)}:{fn}" for p in HARNESS.rglob("*.py")
               for fn, name in _calls_of(p) if name == "select_residues"]
    assert selects == ["settings/configs.py:choose_residues"], selects


def _returns(path: Path, name: str) -> str:
    """The return annotation of function ``name`` (at any depth) in ``path``."""
    fn = next(n for n in ast.walk(ast.parse(path.read_text()))
              if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == name)
    return ast.unparse(fn.returns) if fn.returns else ""


def test_data_between_rooms_is_typed():
    """The store hands out ``PhaseRecord``s and every reader takes them: no module keeps
    ``value_of``'s duck typing (a dict as read or a record alike), and what identifies a
    record reads attributes. The side channels are objects: the per-server facts
    (``serve/facts.ServerFacts``, no ``info[...]`` / ``info.get`` left where they pass), the
    compare result (``publish/comparison.Comparison``), the gate's block
    (``records/gate_block.BaselineBlock``, the manifest's ``baseline``)."""
    found = [f"{p.relative_to(ROOT)}:{n.lineno}" for p in HARNESS.rglob("*.py")
             for n in ast.walk(ast.parse(p.read_text()))
             if (isinstance(n, ast.FunctionDef) and n.name == "value_of")
             or (isinstance(n, ast.Name) and n.id == "value_of")]
    assert not found, found
    # nor ``as_record``'s per-record switch (a dict or a PhaseRecord): the record model's
    # ``typed`` asks it, nothing else names it
    found = [f"{p.relative_to(ROOT)}:{n.lineno}" for p in HARNESS.rglob("*.py")
             for fn, n in _named_by_function(ast.parse(p.read_text()), "as_record")
             if (str(p.relative_to(HARNESS)), fn) != ("records/phase_record.py", "typed")]
    assert not found, found
    store = HARNESS / "records/store.py"
    for name in ("load_records", "read_phase_records", "read_jsonl_records", "read"):
        assert _returns(store, name) == "list[PhaseRecord]", name
    keys = HARNESS / "records/recordkeys.py"
    for fn in ast.parse(keys.read_text()).body:
        if isinstance(fn, ast.FunctionDef) and not fn.name.startswith("_"):
            assert "PhaseRecord" in ast.unparse(fn.args.args[0].annotation), fn.name
    assert _returns(HARNESS / "publish/compare.py", "compare_records") == "Comparison"
    assert _returns(HARNESS / "publish/gate.py", "gate_block") == "BaselineBlock"
    assert _returns(HARNESS / "run/point.py", "boot_config").endswith("ServerFacts]")
    from harness.records.manifest import RunManifest
    assert RunManifest.__dataclass_fields__["baseline"].type.startswith("BaselineBlock")
    assert RunManifest.__dataclass_fields__["timing"].type.startswith("RunTiming")
    assert RunManifest.__dataclass_fields__["plan"].type.startswith("RunPlan")
    _facts_are_plain_data()
    _no_field_is_any()
    facts = ("run/point.py", "run/phase_judge.py", "run/record_builder.py",
             "serve/isolation.py", "backends/local.py", "backends/live.py")
    found = [f"{rel}:{n.lineno} {ast.unparse(n)}" for rel in facts
             for n in ast.walk(ast.parse((HARNESS / rel).read_text()))
             if (isinstance(n, ast.Subscript) and ast.unparse(n.value).endswith("info"))
             or (isinstance(n, ast.Call) and ast.unparse(n.func).endswith(("info.get",
                                                                           "info.pop")))]
    assert not found, found


def test_one_lifecycle_runs_every_sweep():
    """``sweep``, ``--resume``, ``--bisect`` and ``explain`` all run ``residue_sweep.Sweep``: only
    the session constructs a Driver or starts a backend's points."""
    found = []
    for p in HARNESS.rglob("*.py"):
        if p in (HARNESS / "residue_sweep.py", HARNESS / "run" / "driver.py"):
            continue
        for node in ast.walk(ast.parse(p.read_text())):
            if isinstance(node, ast.Call) and ast.unparse(node.func) == "Driver":
                found.append(f"{p.relative_to(ROOT)}:{node.lineno}")
    assert not found, found
    assert len((HARNESS / "command/cli.py").read_text().splitlines()) <= 450


def _assigned_ns_attributes(path: Path) -> list[str]:
    """``ns.X = ...`` (or ``ns.X, ... = ...``) inside a function of ``path`` that takes the
    parsed flags as its parameter ``ns``."""
    found = []
    for fn in ast.walk(ast.parse(path.read_text())):
        if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        if "ns" not in [a.arg for a in fn.args.args]:
            continue
        for node in ast.walk(fn):
            targets = (node.targets if isinstance(node, ast.Assign)
                       else [node.target] if isinstance(node, ast.AugAssign) else [])
            for t in targets:
                for el in (t.elts if isinstance(t, ast.Tuple) else [t]):
                    if (isinstance(el, ast.Attribute) and isinstance(el.value, ast.Name)
                            and el.value.id == "ns"):
                        found.append(f"{path.relative_to(ROOT)}:{node.lineno} {fn.name}: "
                                     f"{ast.unparse(el)}")
    return found


# calls whose result (or the first item of it) is a namespace of parsed flags
_NAMESPACE_MAKERS = {"parse_flags", "resumed_namespace", "namespace_of", "Namespace",
                     "parse_args", "parse_known_args"}


def _namespace_writes(path: Path) -> list[str]:
    """Any write into a namespace in ``path``, through any name bound to one: a parameter
    ``ns``, a name bound to what a ``_NAMESPACE_MAKERS`` call returns (or its first item),
    or an alias of either; written as ``x.a = ...``, ``x.a += ...``, ``del x.a``,
    ``setattr(x, ...)``, ``delattr(x, ...)`` or through ``vars(x)`` / ``x.__dict__``."""
    tree = ast.parse(path.read_text())
    bound = {a.arg for fn in ast.walk(tree) if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef))
             for a in fn.args.args + fn.args.kwonlyargs if a.arg == "ns"}
    for _ in range(3):   # aliases of aliases
        for node in ast.walk(tree):
            if not isinstance(node, ast.Assign):
                continue
            v = node.value
            makes = (isinstance(v, ast.Call) and (getattr(v.func, "id", None) in _NAMESPACE_MAKERS
                                                   or getattr(v.func, "attr", None) in _NAMESPACE_MAKERS))
            alias = isinstance(v, ast.Name) and v.id in bound
            for t in node.targets:
                first = t.elts[0] if isinstance(t, ast.Tuple) and t.elts else t
                if (makes or alias) and isinstance(first, ast.Name):
                    bound.add(first.id)

    def through(e) -> bool:   # x, vars(x), x.__dict__
        if isinstance(e, ast.Name):
            return e.id in bound
        if isinstance(e, ast.Call) and getattr(e.func, "id", None) == "vars" and e.args:
            return through(e.args[0])
        return isinstance(e, ast.Attribute) and e.attr == "__dict__" and through(e.value)
    found = []
    for node in ast.walk(tree):
        targets = (node.targets if isinstance(node, (ast.Assign, ast.Delete))
                   else [node.target] if isinstance(node, ast.AugAssign) else [])
        hits = [el for t in targets for el in (t.elts if isinstance(t, ast.Tuple) else [t])
                if isinstance(el, (ast.Attribute, ast.Subscript)) and through(el.value)]
        if isinstance(node, ast.Call):
            f = node.func
            if getattr(f, "id", None) in ("setattr", "delattr") and node.args \
                    and through(node.args[0]):
                hits.append(node)
            elif isinstance(f, ast.Attribute) and f.attr in _MUTATORS and through(f.value) \
                    and not isinstance(f.value, ast.Name):
                hits.append(node)   # vars(ns).update(...), ns.__dict__.update(...)
        where = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path.name
        found += [f"{where}:{node.lineno} {ast.unparse(h)[:60]}" for h in hits]
    return found


def test_the_namespace_check_sees_every_way_of_writing(tmp_path):
    """The checker itself: a write through the parse's namespace, an alias, setattr,
    vars() and a resumed namespace are each seen; building a new namespace is not a write."""
    src = tmp_path / "options_like.py"
    src.write_text(
        "def f(argv):\n    ns, written = parse_flags(argv)\n    ns.out = 1\n"
        "    other = ns\n    other.slots = 2\n    setattr(ns, 'gpus', 3)\n"
        "    vars(ns)['seed'] = 4\n    ns.__dict__.update(x=5)\n"
        "    r, w = resumed_namespace('id', written, None)\n    r.out += 'x'\n"
        "    ns = argparse.Namespace(**{**vars(ns), 'out': 6})\n    return ns\n")
    assert sorted(int(line.split()[0].rsplit(":", 1)[1]) for line in _namespace_writes(src)) == \
        [3, 5, 6, 7, 8, 10]


def test_options_are_built_without_a_request_or_a_changed_namespace():
    """argv -> ``SweepOptions`` once: building the options sends no request (``--url``'s
    server is read by the session: only ``residue_sweep.py`` calls ``run/live.connect``
    or ``read_server`` outside ``run/live.py``) and never writes into the parsed flags it
    is given (what a flag decides for another is a field of the options)."""
    found = []
    for p in HARNESS.rglob("*.py"):
        if p in (HARNESS / "residue_sweep.py", HARNESS / "run" / "live.py"):
            continue
        found += [f"{p.relative_to(ROOT)}: imports {name}" for m, name in _imports_named(p)
                  if m.endswith("live") and name in ("connect", "read_server")]
    for p in (HARNESS / "options.py", HARNESS / "option_fields.py", HARNESS / "run" / "live.py",
              HARNESS / "serve" / "live_target.py", HARNESS / "settings" / "asked.py",
              *(HARNESS / "settings").glob("flag_*.py")):
        found += _assigned_ns_attributes(p)
    # options.py: no write through any name bound to a namespace (the parse's, --resume's)
    found += _namespace_writes(HARNESS / "options.py")
    assert not found, found


def test_option_building_hands_the_namespace_to_asked_alone():
    """``options.build_options`` reads nothing off the parsed flags itself: ``ns`` goes
    into ``settings/asked.Asked``, and the rules (``flag_checks.RULES``) and the fields
    (``option_fields.FIELDS``) read that."""
    fn = next(n for n in ast.walk(ast.parse((HARNESS / "options.py").read_text()))
              if isinstance(n, ast.FunctionDef) and n.name == "build_options")
    uses = [n for n in ast.walk(fn) if isinstance(n, ast.Name) and n.id == "ns"]
    handed = [a for n in ast.walk(fn) if isinstance(n, ast.Call)
              and getattr(n.func, "id", None) == "Asked" for a in n.args
              if isinstance(a, ast.Name) and a.id == "ns"]
    assert len(uses) == len(handed) == 1


_MUTATORS = {"append", "extend", "insert", "remove", "pop", "clear", "add", "discard",
             "update", "setdefault", "__setitem__"}


def _harness_module_names(path: Path, tree: ast.AST) -> set[str]:
    """The local names ``path`` binds to a harness module (``from .. import server_pool``,
    ``import harness.serve.orphans as orphans``), at any depth of the file."""
    modules = {m.rsplit(".", 1)[-1] for m in imports_of(path)}
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            out |= {a.asname or a.name for a in node.names if a.name in modules}
        elif isinstance(node, ast.Import):
            out |= {a.asname for a in node.names if a.asname and a.name.startswith("harness")}
    return out


def test_no_module_changes_another_modules_globals():
    """What a run needs to hear about (its servers' starts and stops) is given to the run
    (``server_pool.ServerGroup``), never put into another module's global: no
    ``module.NAME.append(...)`` or ``module.NAME = ...`` of a harness module."""
    found = []
    for p in HARNESS.rglob("*.py"):
        tree = ast.parse(p.read_text())
        names = _harness_module_names(p, tree)
        for node in ast.walk(tree):
            target = None
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr in _MUTATORS):
                target = node.func.value
            elif isinstance(node, (ast.Assign, ast.AugAssign)):
                target = next(iter(getattr(node, "targets", None) or [node.target]))
            while isinstance(target, ast.Subscript):
                target = target.value
            if (isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name)
                    and target.value.id in names):
                found.append(f"{p.relative_to(ROOT)}:{node.lineno} {ast.unparse(target)}")
    assert not found, found


def _facts_are_plain_data() -> None:
    """``ServerFacts`` holds JSON values only: no task, no client, nothing running (the
    effective-configuration read still running is the ``PointRunner``'s own)."""
    import types
    import typing
    from harness.serve.facts import ServerFacts
    plain = {str, int, float, bool, dict, list, type(None)}
    hints = typing.get_type_hints(ServerFacts)
    assert hints, "ServerFacts has no fields?"
    bad = {name: t for name, t in hints.items()
           if not set(typing.get_args(t) if isinstance(t, types.UnionType) else (t,)) <= plain}
    assert not bad, f"ServerFacts fields that are not plain data: {bad}"


def _no_field_is_any() -> None:
    """The manifest, its blocks and the server facts say each field's type (``Any`` nowhere)."""
    import dataclasses
    from harness.records import manifest, manifest_blocks
    from harness.serve.facts import ServerFacts
    models = [manifest.RunManifest, ServerFacts] + [
        getattr(manifest_blocks, n) for n in manifest_blocks.__all__
        if dataclasses.is_dataclass(getattr(manifest_blocks, n))]
    found = [f"{m.__name__}.{f.name}" for m in models for f in dataclasses.fields(m)
             if "Any" in str(f.type)]
    assert not found, f"fields typed Any: {found}"


ARCH = ROOT / "docs" / "architecture.md"


def _section(title: str) -> str:
    text = ARCH.read_text()
    start = text.index(f"## {title}")
    end = text.find("\n## ", start + 3)
    return text[start:end if end != -1 else None]


def test_the_architecture_page_states_what_this_file_checks():
    """Every rule bullet names its check, every named check exists, and every check of this
    file is named by a rule (the page states only what is checked, and checks what it
    states)."""
    rules = _section("The rules (each is checked)")
    bullets = [b for b in re.split(r"\n- ", rules)[1:]]
    named: set[str] = set()
    for b in bullets:
        checks = re.findall(r"`(test_\w+)`", b.split("(checked:", 1)[-1])
        assert "(checked:" in b and checks, f"a rule without its check: {b[:80]!r}"
        named |= set(checks)
    tests = {n for n in globals() if n.startswith("test_")}
    assert named <= tests, f"named but not written: {sorted(named - tests)}"
    unstated = tests - named - {"test_the_architecture_page_states_what_this_file_checks"}
    assert not unstated, f"checked but not stated on the page: {sorted(unstated)}"


def _defined(module: Path) -> set[str]:
    """Top-level names ``module`` defines or imports."""
    out: set[str] = set()
    for node in ast.parse(module.read_text()).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            for t in (node.targets if isinstance(node, ast.Assign) else [node.target]):
                out |= {n.id for n in ast.walk(t) if isinstance(n, ast.Name)}
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            out |= {(a.asname or a.name).split(".")[0] for a in node.names}
    return out


def _module_file(dotted: list[str]) -> Path | None:
    for base in (HARNESS, ROOT):
        p = base.joinpath(*dotted)
        if p.with_suffix(".py").is_file():
            return p.with_suffix(".py")
        if (p / "__init__.py").is_file():
            return p / "__init__.py"
    return None


def _resolves(ref: str) -> bool | None:
    """True / False for a backticked ``path.py`` or ``module.NAME`` reference; None when
    the text is not one (a flag, a call, a field)."""
    if re.fullmatch(r"[\w/]+\.(py|md|sh)", ref):
        return (HARNESS / ref).exists() or (ROOT / ref).exists()
    if not re.fullmatch(r"[\w/]+(\.\w+)+", ref):
        return None
    head, *names = ref.split(".")
    parts = head.split("/")
    for i in range(len(names) - 1, -1, -1):   # the longest module prefix, then its name
        module = _module_file(parts + names[:i])
        if module is not None:
            return names[i] in _defined(module)
    return None


def test_where_a_change_goes_names_real_places():
    table = _section("Where a change goes")
    refs = re.findall(r"`([^`]+)`", table)
    bad = [r for r in refs if _resolves(r) is False]
    assert not bad, f"the table names what does not exist: {bad}"


def test_a_new_verdict_isolation_engine_or_writer_is_one_entry():
    """The four rows the issue names: each says one entry in one registry, and adding an
    entry there is all the code needs (the rest reads the registry: the StrEnum of its
    values too, and ``make_adapter`` builds whichever adapter ``ADAPTERS`` names)."""
    table = _section("Where a change goes")
    row = {ln.split("|")[1].strip(): ln for ln in table.splitlines() if ln.startswith("| ")}
    assert "one row of `names/verdict.VERDICT_TABLE`" in row["a new verdict or a change of what a verdict means"]
    assert "one `Isolation(...)` entry in `names/isolation.POLICIES`" in row["a new isolation mode"]
    assert "one entry in `serve/engines.ADAPTERS`" in row["a new engine"]
    assert "one entry in `publish/writers.WRITERS`" in row["a new output format"]
    from harness.serve import engines
    from harness.names import engine, isolation, phase
    from harness.names import verdict as vocabulary
    from harness.publish import writers
    assert [m.value for m in vocabulary.VerdictName] == [v.name for v in vocabulary.VERDICT_TABLE]
    assert [m.value for m in phase.PhaseName] == list(phase.PHASES)
    assert [m.value for m in isolation.IsolationName] == list(isolation.POLICIES)
    # the engines by name (names/engine.py) are the adapters' engines, in the same order
    assert [m.value for m in engine.EngineName] == list(engine.ENGINES) == list(engines.ADAPTERS)
    tree = ast.parse((HARNESS / "serve/engines.py").read_text())
    builders = [n for n in tree.body if isinstance(n, ast.FunctionDef)
                and n.name in ("make_adapter", "_make_adapter")]
    named = {n.id for f in builders for n in ast.walk(f) if isinstance(n, ast.Name)}
    adapters = {c.__name__ for c in engines.ADAPTERS.values()}
    assert builders and not named & adapters, named & adapters   # no engine built by name
    from harness.settings.flags import FLAGS
    (iso_flag,) = [f for f in FLAGS if f.name == "--isolation"]
    assert tuple(iso_flag.kw["choices"]) == isolation.ISOLATIONS == tuple(isolation.POLICIES)
    assert vocabulary.VERDICTS == tuple(v.name for v in vocabulary.VERDICT_TABLE)
    assert all(w.name == n and callable(w.wanted) and callable(w.write)
               for n, w in writers.WRITERS.items())
    session = (HARNESS / "residue_sweep.py").read_text()
    assert "WRITERS.values()" in session   # every registered writer runs, none by name


def test_the_rule_returns_structure_not_markdown():
    """``bugb.py`` builds its reasons as ``phrase.Phrase`` parts; only a reader renders
    them (it imports no markdown helper)."""
    found = [m for m, _ in _imports_named(HARNESS / "judge/bugb.py") if "ghmarkdown" in m]
    assert not found, found


# -- values are types ------------------------------------------------------------------
# Each vocabulary's home: the table its StrEnum is read off, where its words are declared.
_VOCABULARY_HOMES = {"verdict": HARNESS / "names/verdict.py", "phase": HARNESS / "names/phase.py",
                     "isolation": HARNESS / "names/isolation.py", "engine": HARNESS / "names/engine.py"}
# Comparisons with such a word that is another vocabulary's value, by what is compared
# (the other side's name, attribute or key), each with why.
_OTHER_VOCABULARIES = {
    "runner": "--runner auto: the model runner vLLM picks, not the isolation",
    "modulus": "--modulus auto: the modulus read off the configuration, not the isolation",
    "poison": "--poison auto: fill where the engine can, not the isolation",
    "owned_by": "GET /v1/models' owned_by: the word a vLLM server writes of itself",
    # --reference cold judges the hits against the same server's cold answer: a word of
    # --reference's words (passage, cold, first, ...), not the phase
    "reference": "--reference cold: the reference word, not the phase",
    "ref": "--reference cold (run/point.py's self.opts.reference): not the phase",
    "refs": "--reference cold among the records' references (report/divergence.py): not the phase",
}


def _vocabularies() -> dict[str, set[str]]:
    from harness.names.engine import ENGINES
    from harness.names.isolation import POLICIES
    from harness.names.phase import PHASES
    from harness.names.verdict import VERDICT_TABLE
    return {"verdict": {v.name for v in VERDICT_TABLE}, "phase": set(PHASES), "isolation": set(POLICIES),
            "engine": set(ENGINES)}


def _strings(node: ast.AST) -> list[str]:
    """The string constants of a constant or of a tuple / list / set of them."""
    elts = node.elts if isinstance(node, (ast.Tuple, ast.List, ast.Set)) else [node]
    return [e.value for e in elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]


def _subject(node: ast.AST) -> str | None:
    """What the other side of a comparison names: ``x``, ``a.x``, ``a["x"]``,
    ``a.get("x")``, ``getattr(a, "x")``, ``value_of(a, "x")``."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant):
        return str(node.slice.value)
    if isinstance(node, ast.Call):
        func = ast.unparse(node.func)
        i = 0 if func.endswith(".get") else 1 if func in ("getattr", "value_of") else None
        if i is not None and len(node.args) > i and isinstance(node.args[i], ast.Constant):
            return str(node.args[i].value)
    return None


def _compared_words(source: str):
    """(line, word, what it is compared with) of every ``==`` / ``!=`` with a constant
    string, ``in`` / ``not in`` of a constant string or in a tuple / list / set of them,
    and ``match`` case of a constant string. Docstrings, f-strings and argparse choices are
    no comparison, so they are not seen."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            for op, left, right in zip(node.ops, sides, sides[1:]):
                if isinstance(op, (ast.Eq, ast.NotEq)):
                    pairs = [(left, right), (right, left)]
                elif isinstance(op, (ast.In, ast.NotIn)):
                    pairs = [(left, right)] + ([(right, left)] if isinstance(
                        right, (ast.Tuple, ast.List, ast.Set)) else [])
                else:
                    continue
                for const, other in pairs:
                    if isinstance(const, ast.Constant) or (
                            isinstance(const, (ast.Tuple, ast.List, ast.Set)) and const is right):
                        for word in _strings(const):
                            yield node.lineno, word, _subject(other)
        elif isinstance(node, ast.Match):
            for case in node.cases:
                for pat in ast.walk(case.pattern):
                    if isinstance(pat, ast.MatchValue):
                        for word in _strings(pat.value):
                            yield pat.lineno, word, _subject(node.subject)


def test_no_module_compares_a_verdict_phase_isolation_or_engine_string():
    """A verdict, a phase, an isolation and an engine are values of a StrEnum read off their
    table (``vocabulary.VerdictName``, ``vocabulary.PhaseName``, ``isolation.IsolationName``,
    ``engines.EngineName``): a module outside the table compares the member or asks the
    row (``v in CLEAN``, ``verdict_info(v).bug``, ``policy(iso).reuses_server``), never the
    string. Checked over every module of ``harness/`` and ``engine/``; a word of another
    vocabulary is told by what it is compared with (``_OTHER_VOCABULARIES``)."""
    sample = ('if r.verdict != "ok": pass\nif e in ("lab", "x"): pass\n'
              'if "restore" in seen: pass\nmatch iso:\n    case "fresh": pass\n'
              'if cfg.runner == "auto": pass\nif opts.isolation == "auto": pass\n'
              'if value_of(r, "phase") == "cold": pass\n')
    assert sorted((w, s) for _, w, s in _compared_words(sample)) == [
        ("auto", "isolation"), ("auto", "runner"), ("cold", "phase"), ("fresh", "iso"),
        ("lab", "e"), ("ok", "verdict"), ("restore", "seen"), ("x", "e")]   # the checker sees every form
    vocab = _vocabularies()
    found = []
    for p in sorted([*HARNESS.rglob("*.py"), *(ROOT / "engine").rglob("*.py")]):
        for line, word, subject in _compared_words(p.read_text()):
            kinds = [k for k, words in vocab.items()
                     if word in words and _VOCABULARY_HOMES[k] != p]
            if kinds and subject not in _OTHER_VOCABULARIES:
                found.append(f"{p.relative_to(ROOT)}:{line} {'/'.join(kinds)} {word!r}")
    assert not found, found


# -- one exception tree ----------------------------------------------------------------
def _harness_exceptions() -> dict[str, type]:
    """Every exception class a module of ``harness/`` defines, by ``module.Name``."""
    import importlib
    import inspect
    import pkgutil

    import harness
    out = {}
    for m in pkgutil.walk_packages(harness.__path__, "harness."):
        if m.name.rsplit(".", 1)[-1] == "__main__":   # importing it runs the CLI
            continue
        mod = importlib.import_module(m.name)
        for name, obj in vars(mod).items():
            if (inspect.isclass(obj) and issubclass(obj, BaseException)
                    and obj.__module__ == m.name):
                out[f"{m.name}.{name}"] = obj
    return out


def test_every_harness_exception_is_a_harness_error():
    """One error tree: every exception class of ``harness/`` derives from
    ``errors.HarnessError`` and carries its exit code, or is a ``HandledError`` (no exit
    code: caught where it is raised). Where a caller's contract needs a builtin kind (an
    argparse ``type=`` converter raises ``ValueError``; pytest reads a failed check as an
    ``AssertionError``), the class keeps that base beside its harness one: none needs to
    stay outside the tree. ``engine/`` has its own errors (it imports nothing of
    ``harness/``)."""
    from harness.errors import HarnessError
    found = _harness_exceptions()
    assert "harness.errors.UsageError" in found and "harness.serve.client.ServerGone" in found
    outside = sorted(n for n, c in found.items() if not issubclass(c, HarnessError))
    assert not outside, outside
    from harness.errors import HandledError
    no_code = sorted(n for n, c in found.items() if c.exit_code is None
                     and not issubclass(c, HandledError))
    assert not no_code, no_code
    bad_code = sorted(n for n, c in found.items()
                      if c.exit_code is not None and not isinstance(c.exit_code, int))
    assert not bad_code, bad_code


def test_cli_main_maps_errors_by_the_base_class_once():
    """``cli.main`` has one ``except`` clause for the harness's errors (any exception class
    of ``harness/``), ``HarnessError`` alone: the exit code and the words come from the
    error's class, not from a list of names."""
    import builtins

    from harness.command import cli
    tree = ast.parse((HARNESS / "command/cli.py").read_text())
    (main,) = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "main"]
    clauses = []
    for h in (h for t in ast.walk(main) if isinstance(t, ast.Try) for h in t.handlers):
        names = [ast.unparse(e) for e in (h.type.elts if isinstance(h.type, ast.Tuple)
                                          else [h.type] if h.type else [])]
        classes = [getattr(cli, n, None) or getattr(builtins, n, None) for n in names]
        if any(isinstance(c, type) and c.__module__.startswith("harness.") for c in classes):
            clauses.append(names)
    assert clauses == [["HarnessError"]], clauses


# -- every module on its map -----------------------------------------------------------
def _layers() -> dict[str, str]:
    """The "Layers" block of this page as ``{path: its entry's text}``. An entry is a line
    that starts, indented two spaces per folder level, with ``name.py`` or ``name/``; its
    path is its folder's path and its name (``harness/records/store.py``); the lines below it
    indented deeper than any entry could be (its description's continuation) are its
    text."""
    block = re.search(r"## Layers\n+```\n(.*?)```", ARCH.read_text(), re.S).group(1)
    entries: dict[str, str] = {}
    folders: list[str] = []
    path = None
    for line in block.splitlines():
        m = re.match(r"( *)(\w+(?:\.py|/))(?:\s|$)", line)
        indent = len(line) - len(line.lstrip(" "))
        if m and indent % 2 == 0 and indent // 2 <= len(folders):
            del folders[indent // 2:]
            path = "".join(folders) + m.group(2)
            entries[path] = line[m.end():]
            if path.endswith("/"):
                folders.append(m.group(2))
        elif path is not None:
            entries[path] += "\n" + line
    return entries


def _mapped_by_registry() -> set[Path]:
    """Modules mapped by their registry: an engine adapter's module (the one its class in
    ``serve/engines.ADAPTERS`` is defined in) is on a map through that entry, where the map
    names ``ADAPTERS`` (the "Layers" entry of ``engines.py``, ``serve``'s docstring)."""
    import inspect
    from harness.serve.engines import ADAPTERS
    return {Path(inspect.getfile(cls)).resolve() for cls in ADAPTERS.values()}


def test_every_harness_module_is_on_the_map():
    """Every module of ``harness/`` (``__init__.py`` and ``__main__.py`` aside) is on the
    "Layers" map: an entry of its own (``harness/records/store.py``: ``store.py`` under
    ``records/``), or, in a sub-package, its stem is a word of the package's entry (``base``
    in ``backends/``'s); a module of ``harness/`` itself has an entry of its own. Every
    file the map names exists."""
    entries = _layers()
    assert {"harness/", "harness/command/cli.py", "harness/run/", "harness/records/store.py",
            "harness/backends/"} <= set(entries)   # the checker reads the block's shape
    assert "base.py" in entries["harness/backends/"] and "harness/backends/base.py" not in entries
    missing = []
    registered = _mapped_by_registry() if "ADAPTERS" in entries["harness/serve/engines.py"] else set()
    for p in sorted(HARNESS.rglob("*.py")):
        if p.name in ("__init__.py", "__main__.py") or p.resolve() in registered:
            continue
        rel = p.relative_to(ROOT)
        package = entries.get(f"{rel.parent}/", "") if rel.parent != Path("harness") else ""
        if str(rel) not in entries and not re.search(rf"\b{p.stem}\b", package):
            missing.append(str(rel))
    assert not missing, f"not on docs/architecture.md's map: {missing}"
    gone = [e for e in entries if not (ROOT / e).exists()]
    assert not gone, f"on the map but not in the tree: {gone}"


def _packages() -> list[Path]:
    return sorted(p.parent for root in (HARNESS, ROOT / "engine")
                  for p in root.rglob("__init__.py"))


def test_every_package_names_its_modules():
    """Every package of ``harness/`` and ``engine/`` (``engine/`` itself too) has a module
    map in its ``__init__`` docstring: each of its modules (``__init__`` and ``__main__``
    aside) and sub-packages named as a literal: ``name``, ``name.py`` or ``name/`` in
    double backticks, as a map's entries are. ``harness/`` itself is mapped on this page
    ("Layers", ``test_every_harness_module_is_on_the_map``)."""
    missing = []
    for pkg in _packages():
        if pkg == HARNESS:
            continue
        doc = ast.get_docstring(ast.parse((pkg / "__init__.py").read_text())) or ""
        named = set(re.findall(r"``(\w+)(?:\.py|/)?``", doc))
        registered = _mapped_by_registry() if "``ADAPTERS``" in doc else set()
        children = [p.stem for p in pkg.glob("*.py")
                    if p.name not in ("__init__.py", "__main__.py") and p.resolve() not in registered]
        children += [d.name for d in pkg.iterdir() if (d / "__init__.py").is_file()]
        missing += [f"{pkg.relative_to(ROOT)}: {c}" for c in sorted(children) if c not in named]
    assert not missing, f"a package's __init__ docstring does not name: {missing}"


# -- every file the code cites exists -----------------------------------------------------
_CITED = re.compile(r"(?<![\w./-])((?:[\w.-]+/)*\w+\.py)\b")
#: vLLM's own top-level folders: a path starting at one is vLLM's (``v1/core/...``)
_VLLM_FOLDERS = ("vllm", "v1", "config", "compilation", "entrypoints", "platforms", "utils",
                 "device_allocator", "third_party", "model_executor")


def _comments_and_docstrings(source: str) -> list[tuple[int, str]]:
    """(line, text) of every comment and every string that is a statement of its own
    (a module, class or function docstring, an attribute's docstring)."""
    import io
    import tokenize
    tokens = tokenize.generate_tokens(io.StringIO(source).readline)
    out = [(t.start[0], t.string) for t in tokens if t.type == tokenize.COMMENT]
    out += [(n.lineno, n.value.value) for n in ast.walk(ast.parse(source))
            if isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant)
            and isinstance(n.value.value, str)]
    return out


def test_every_file_the_code_cites_exists():
    """Every ``name.py`` path a comment or docstring of ``harness/`` or ``engine/`` cites
    is a file of this repository, from its root, ``harness/``, ``engine/`` or the citing
    file's folder; or it is vLLM's: it starts at ``vllm/`` or at one of vLLM's own
    top-level folders (``_VLLM_FOLDERS``), or it is the tail of such a path written
    anywhere in ``harness/`` or ``engine/`` (``gpu_worker.py`` after
    ``vllm/v1/worker/gpu_worker.py``)."""
    files = sorted([*HARNESS.rglob("*.py"), *(ROOT / "engine").rglob("*.py")])
    ours = {part for p in files for part in p.relative_to(ROOT).parts[:-1]}
    assert not ours & (set(_VLLM_FOLDERS) - {"vllm"})   # a folder of ours is never vLLM's
    vllm_paths = {m for p in files for m in _CITED.findall(p.read_text())
                  if m.split("/", 1)[0] in _VLLM_FOLDERS and "/" in m}
    sample = "# see run/nothing_here.py and v1/core/x.py\n'''x.py, harness/settings/flags.py'''\n"
    assert [c for _, t in _comments_and_docstrings(sample) for c in _CITED.findall(t)] == [
        "run/nothing_here.py", "v1/core/x.py", "x.py", "harness/settings/flags.py"]   # the checker sees both
    bad = []
    for p in files:
        for line, text in _comments_and_docstrings(p.read_text()):
            for m in _CITED.finditer(text):
                cited = m.group(1)
                if any((base / cited).is_file()
                       for base in (ROOT, HARNESS, ROOT / "engine", p.parent)):
                    continue
                if cited.split("/", 1)[0] in _VLLM_FOLDERS and "/" in cited:
                    continue
                if any(v.endswith("/" + cited) for v in vllm_paths):
                    continue
                bad.append(f"{p.relative_to(ROOT)}:{line + text.count(chr(10), 0, m.start())} "
                           f"{cited}")
    assert not bad, f"cited, but no such file here (nor vLLM's): {bad}"


# -- an engine, an isolation mode, a report column: each read off its one table ----------
def _measured(row: str) -> int:
    """The files a "Where a change goes" row says the change measured: ``measured: N``."""
    m = re.search(r"measured[^:]*: (\d+) files?\b", row)
    assert m, f"no measured count in {row[:60]!r}"
    return int(m.group(1))


def test_engines_isolations_and_columns_are_read_off_their_tables():
    """``--engine``'s choices and help are ``serve/engines.ADAPTERS``' (no module but
    ``names/engine.py`` spells a group of engine names), ``--isolation``'s are
    ``names/isolation.POLICIES``',
    and the results table's columns after its phase cells are ``report/columns.COLUMNS``:
    only ``columns.py`` builds a ``Column``, ``sections.results_rows`` reads the table (the
    markdown table and the terminal's are its rows) and every legend of ``render.py`` says
    ``columns.legend()``. The page's rows state what each change measured: at most 3, 2
    and 3 files."""
    from harness.serve import engines
    from harness.names import isolation
    from harness.settings.flags import FLAGS
    flag = {f.name: f for f in FLAGS}
    assert tuple(flag["--engine"].kw["choices"]) == tuple(engines.ADAPTERS)
    assert callable(flag["--engine"].help)   # engine_help: built from the adapters
    assert tuple(flag["--isolation"].kw["choices"]) == tuple(isolation.POLICIES)
    assert flag["--isolation"].help == isolation.isolation_help(default="fresh")
    found = [f"{p.relative_to(ROOT)}:{line} {sorted(names)}"
             for p in HARNESS.rglob("*.py") if p != HARNESS / "names/engine.py"
             for line, names in _string_groups(p) if len(names & set(engines.ADAPTERS)) >= 2]
    assert not found, found
    report = HARNESS / "report"
    built = [p.name for p in report.glob("*.py") if p.name != "columns.py"
             for n in ast.walk(ast.parse(p.read_text())) if isinstance(n, ast.Call)
             and getattr(n.func, "id", "") == "Column"]
    assert not built, built
    results_rows = next(n for n in ast.walk(ast.parse((report / "sections.py").read_text()))
                        if isinstance(n, ast.FunctionDef) and n.name == "results_rows")
    assert "COLUMNS" in {n.id for n in ast.walk(results_rows) if isinstance(n, ast.Name)}
    terminal = ast.parse((report / "terminal.py").read_text())
    calls = {getattr(n.func, "id", "") for n in ast.walk(terminal) if isinstance(n, ast.Call)}
    assert "results_rows" in calls and "table" not in calls
    legends = [n for n in ast.walk(ast.parse((report / "render.py").read_text()))
               if isinstance(n, ast.JoinedStr) and any(
                   isinstance(v, ast.Constant) and "is bold." in v.value for v in n.values)]
    assert len(legends) == 3 and all(any(
        isinstance(v, ast.FormattedValue) and getattr(v.value.func, "id", "") == "columns_legend"
        for v in s.values) for s in legends)
    rows = {ln.split("|")[1].strip(): ln for ln in _section("Where a change goes").splitlines()
            if ln.startswith("| ")}
    assert "one `Column(...)` entry in `report/columns.COLUMNS`" in rows["a new column of the results table"]
    assert _measured(rows["a new engine"]) <= 3   # its name, its module, its ADAPTERS entry
    assert _measured(rows["a new isolation mode"]) <= 2
    assert _measured(rows["a new column of the results table"]) <= 3


# the names a SweepOptions goes by in harness/ (settings/sweep_options.py: four parts)
OPTION_HOLDERS = {"opts", "options", "_opts"}


def _flat_reads(tree: ast.AST) -> list[str]:
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in FIELD_PART:
            holder = node.value
            name = holder.attr if isinstance(holder, ast.Attribute) else getattr(holder, "id", "")
            if name in OPTION_HOLDERS:
                out.append(f"line {node.lineno}: {name}.{node.attr}")
    return out


def test_no_module_reads_a_field_past_its_part():
    found = {}
    for path in sorted((ROOT / "harness").rglob("*.py")):
        hits = _flat_reads(ast.parse(path.read_text(), str(path)))
        if hits:
            found[str(path.relative_to(ROOT))] = hits
    assert not found
    assert _flat_reads(ast.parse("opts.residues\nself.opts.slots\nopts.measure.residues\n")) == [
        "line 1: opts.residues", "line 2: opts.slots"]   # the checker sees both forms
