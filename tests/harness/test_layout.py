"""The layering of ``harness/`` (docs/architecture.md), checked over the AST imports:
no import cycle, ``run/*`` never imports ``backends/*``, the report never imports the run
layer's runtime, and no source file over 600 lines."""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HARNESS = ROOT / "harness"
MAX_LINES = 600


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


def test_no_import_cycle_inside_harness():
    g = graph()
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(m: str) -> None:
        state[m] = 1
        stack.append(m)
        for n in sorted(g[m]):
            if state.get(n) == 1:
                cycle = stack[stack.index(n):] + [n]
                raise AssertionError("import cycle: " + " -> ".join(cycle))
            if n not in state:
                visit(n)
        stack.pop()
        state[m] = 2

    for m in sorted(g):
        if m not in state:
            visit(m)


def test_run_layer_never_imports_a_backend():
    g = graph()
    for m, deps in g.items():
        if m.startswith("harness.run"):
            assert not {d for d in deps if d.startswith("harness.backends")}, m


def test_reports_compare_and_gate_read_records_not_the_run_runtime():
    g = graph()
    allowed = {"harness.run", "harness.run.records"}
    for m, deps in g.items():
        if m.startswith(("harness.report", "harness.compare", "harness.gate")):
            used = {d for d in deps if d.startswith("harness.run")}
            assert used <= allowed, (m, used - allowed)
            assert "harness.report" not in deps or m.startswith("harness.report"), m


def test_no_source_file_over_the_limit():
    long = {str(p.relative_to(ROOT)): n for p in HARNESS.rglob("*.py")
            if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert not long, long


def test_the_graph_sees_relative_imports():
    # guards the checker itself: a known edge must be found
    assert "harness.run.driver" in graph()["harness.backends.local"]
    assert "harness.bugb" in graph()["harness.configs"]
