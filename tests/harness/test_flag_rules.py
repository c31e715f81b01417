"""The cross-flag rules are one table (``settings/flag_checks.RULES``, issues 34 and 47): every
rule relates real flags, and each one, broken on a command line, is the one ``UsageError``
line it says (a ``warns`` row: its line among the options' notes), from the options alone
(no server, no sweep); no module but the table raises a cross-flag check's line."""
from __future__ import annotations

import pytest

from harness.errors import UsageError
from harness.options import options_from_argv
from harness.settings.asked import Asked
from harness.settings.flag_checks import RULES
from harness.settings.flag_facts import MATRIX_FLAGS, SERVE_FIELDS, SERVER_FLAGS
from harness.settings.flag_manifest import parse_flags
from harness.settings.flags import FLAGS
from tests.reports import synth

LAB_LINE = "python -m engine.lab --block-size 16 --enable-prefix-caching"
TP_LINE = ("vllm serve {model} --speculative-config '{\"method\": \"ngram\", "
           "\"num_speculative_tokens\": 3}' --enable-prefix-caching -tp 2")

# a command line that breaks each rule (keyed by the flags it relates)
BROKEN = {
    ("--history", "--load"): ["--history", "sibling", "--load", "2"],
    ("--async-scheduling", "--engine"): ["--async-scheduling", "on"],
    ("--history", "--phases"): ["--history", "evict", "--phases", "cold"],
    ("--url", "--prompts", "--seed"): ["--url", "http://127.0.0.1:9", "--seed", "0,1"],
    ("--url", "--load"): ["--url", "http://127.0.0.1:9", "--load", "2"],
    ("--url", "--reference"): ["--url", "http://127.0.0.1:9", "--reference", "consensus"],
    ("--server-cmd", "--engine"): ["--server-cmd", "x --port {port}"],
    ("--ray-address", "--backend"): ["--ray-address", "auto"],
    ("--slots", "--gpus"): ["--slots", "2", "--gpus", "0"],
    ("--cache-dir", "--engine"): ["--cache-dir", "/tmp/c"],
    ("--launcher", "--engine"): ["--engine", "cmd", "--server-cmd", "x {port}",
                                 "--launcher", "prefork"],
    ("--launcher", "--backend"): ["--launcher", "prefork", "--backend", "ray"],
    ("--max-requests", "--url"): ["--max-requests", "10"],
    ("--concurrency", "--url"): ["--concurrency", "2"],
    ("--isolation", "--url"): ["--isolation", "live"],
    ("--auto-sample",): ["--isolation", "auto", "--auto-sample", "-1"],
    ("--auto-sample", "--isolation"): ["--auto-sample", "2"],
    ("--load-mode", "--load"): ["--load-mode", "cancel"],
    ("--prefix-cache", "--no-prefix-cache"): ["--prefix-cache", "--no-prefix-cache"],
    ("--no-prefix-cache", "--phases"): ["--no-prefix-cache"],
    ("--prompts", "--context", "--answer-lines"): ["--prompts", "{prompts}", "--context", "500"],
    ("--allow-fewer", "--baseline"): ["--allow-fewer"],
    ("--served-config", "--engine"): ["--served-config", "{}"],
    ("--seed", "--prompts"): ["--prompts", "{prompts}", "--seed", "0,1"],
    ("--bisect", "--baseline"): ["--bisect", "--baseline", "x.jsonl"],
    ("--poison", "--engine"): ["--engine", "sglang", "--model", "owner/m", "--poison", "on"],
    ("--poison", "--engine", "--engine-arg", "--serve", "--url"):
        ["--engine", "cmd", "--server-cmd", "x {port}", "--poison", "on"],
    ("--url", *SERVER_FLAGS): ["--url", "http://127.0.0.1:9", "--spec", "ngram"],
    ("--engine-arg", "--gpus"): ["--engine", "vllm", "--engine-arg=--tensor-parallel-size=2"],
    ("--serve", "--url", "--engine"): ["--serve", LAB_LINE, "--engine", "cmd",
                                       "--server-cmd", "x {port}"],
    ("--serve", *SERVE_FIELDS): ["--serve", LAB_LINE, "--block-size", "64"],
    ("--serve", "--gpus"): ["--serve", TP_LINE, "--gpus", "0,1"],
    ("--draft-model", "--engine"): ["--draft-model", "/models/d"],
    ("--engine-arg", "--engine"): ["--engine", "cmd", "--server-cmd", "x {port}",
                                   "--engine-arg=--foo"],
    ("--isolation", "--engine"): ["--engine", "cmd", "--server-cmd", "x {port}",
                                  "--isolation", "restore"],
    ("--isolation", "--backend"): ["--backend", "ray", "--isolation", "reset"],
    ("--backend", "--url"): ["--backend", "live"],
    ("--reference", "--phases"): ["--reference", "cold", "--phases", "self-hit"],
    ("--max-tokens", "--answer-lines"): ["--max-tokens", "1"],
    ("--baseline", *MATRIX_FLAGS): ["--baseline", "{baseline}"],
    ("--engine", "--model"): ["--engine", "vllm"],
    ("--engine", "--server-cmd"): ["--engine", "cmd"],
    ("--gh-repo", "--gh-dry-run", "--gh-issue"): ["--gh-dry-run"],
    ("--case", "--prompts"): ["--case", "a"],
    ("--gpus",): ["--gpus", "0,0"],
    ("--url", "--history"): ["--url", "http://127.0.0.1:9", "--history", "evict"],
    ("--engine", "--serve", "--patches", "--prefix-match-unit", "--block-size", "--cudagraph"):
        ["--engine", "sglang", "--model", "owner/m", "--cudagraph", "FULL"],
    ("--prompts", "--reference"): ["--prompts", "{prompts}"],
    ("--runner", "--engine"): ["--runner", "v2"],
}


def test_every_rule_relates_real_flags_and_has_a_broken_example():
    names = {f.name for f in FLAGS}
    for rule in RULES:
        assert set(rule.flags) <= names, rule.flags
    assert [r.flags for r in RULES if r.flags not in BROKEN] == []


def _argv(rule, tmp_path) -> list[str]:
    prompts = tmp_path / "cases.jsonl"
    prompts.write_text('{"id": "q", "messages": [{"role": "user", "content": "Say hi."}]}\n')
    other = synth.make_config(spec="none", ctx="fast")   # a configuration this run lacks
    baseline = synth.write_jsonl(tmp_path / "base.jsonl", synth.sweep(other, range(3)))
    model = tmp_path / "m"
    model.mkdir(exist_ok=True)
    return [a.replace("{prompts}", str(prompts)).replace("{baseline}", str(baseline))
            .replace("{model}", str(model)) for a in BROKEN[rule.flags]]


def _asked(argv: list[str]) -> Asked:
    """The rules' view of ``argv``, as ``options.build_options`` builds it."""
    return Asked(*parse_flags(argv))


@pytest.mark.parametrize("rule", RULES, ids=lambda r: "+".join(r.flags[:4]))
def test_each_rule_broken_is_its_one_line(rule, tmp_path):
    argv = [*_argv(rule, tmp_path), "--out", str(tmp_path / "o")]
    asked = _asked(argv)
    assert rule.broken(asked)
    if rule.warns:   # said once, the options built
        assert options_from_argv(argv).flag_notes == (rule.says(asked),)
        return
    with pytest.raises(UsageError) as e:
        options_from_argv(argv)
    assert str(e.value) == rule.says(asked)


# Lines that name two sweep flags but are not a check across flags: each needs what only
# a request, a file or the environment tells (a server's report, a run's manifest, gh).
_NOT_CROSS_FLAG = {
    ("run/live.py", ("--phases", "--url")): "the server reports prefix caching off",
    ("run/live.py", ("--api-key", "--url")): "the server refused the key",
    ("run/resume.py", ("--resume", "--url")): "the resumed run's manifest was a --url run",
    ("publish/posting.py", ("--gh-dry-run", "--gh-issue", "--gh-repo")): "no gh, no token",
    ("publish/posting.py", ("--gh-dry-run", "--gh-issue")): "no gh, no token",
    ("publish/posting.py", ("--gh-issue", "--gh-repo")): "a token but no repository",
}


# Flags checked against a stored file, not against each other: no row of RULES can check
# them (a row reads one command line's flags; here the namespace the rows read is built from
# that file, by this very check). Each named by its function, with why.
_AGAINST_A_STORED_FILE = {
    ("run/resume.py", "resumed_namespace"):
        "a flag written beside --resume against the resumed run's manifest (only the "
        "MAY_CHANGE flags may differ): the namespace RULES reads is that manifest's, built "
        "here, so the check runs before the rows, on the stored manifest",
}


def test_flags_checked_against_a_stored_file_are_named():
    """Issue 47 point 3 (A4): what compares written flags with a stored manifest is named
    here with its reason (and in docs/architecture.md), and still raises its line."""
    import ast
    from tests.conftest import ROOT
    for (path, name), why in _AGAINST_A_STORED_FILE.items():
        tree = ast.parse((ROOT / "harness" / path).read_text())
        fn = next(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == name)
        raised = [n for n in ast.walk(fn) if isinstance(n, ast.Raise)
                  and getattr(getattr(n.exc, "func", None), "id", "") == "UsageError"]
        assert raised and why, (path, name)
    arch = (ROOT / "docs" / "architecture.md").read_text()
    assert all(f"`{name}`" in arch for _, name in _AGAINST_A_STORED_FILE)


def test_no_module_but_the_table_checks_flags_against_each_other():
    """Issue 47 point 3: a ``UsageError`` whose line names two sweep flags is a row of
    ``RULES`` (or says what a request, file or the environment told: ``_NOT_CROSS_FLAG``)."""
    import ast
    import re
    from tests.conftest import ROOT
    names = {f.name for f in FLAGS}
    harness = ROOT / "harness"
    table = {harness / "settings" / "flag_checks.py", harness / "settings" / "flag_facts.py"}
    found = []
    for p in sorted(harness.rglob("*.py")):
        if p in table:
            continue
        for node in ast.walk(ast.parse(p.read_text())):
            if not (isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call)
                    and getattr(node.exc.func, "id", "") == "UsageError" and node.exc.args):
                continue
            text = "".join(v.value for v in ast.walk(node.exc.args[0])
                           if isinstance(v, ast.Constant) and isinstance(v.value, str))
            flags = tuple(sorted({m for m in re.findall(r"--[a-z][a-z-]*", text) if m in names}))
            where = (str(p.relative_to(harness)), flags)
            if len(flags) >= 2 and where not in _NOT_CROSS_FLAG:
                found.append(f"{where[0]}:{node.lineno} {' '.join(flags)}")
    assert found == []


def test_argv_is_scanned_only_in_the_command_room():
    """Issue 47 point 3: no module reads flags off raw tokens (``"--x" in argv``,
    ``a.startswith("--x")``) but the command room, where each verb's argv is read, and
    ``settings/flag_manifest.py``, where the sweep's is parsed once; the rules read the
    flags ``parse_flags`` says were written."""
    import ast
    from tests.conftest import ROOT
    harness = ROOT / "harness"
    allowed = {"command", "settings/flag_manifest.py", "serve/serve_line.py"}
    found = []
    for p in sorted(harness.rglob("*.py")):
        rel = str(p.relative_to(harness))
        if rel.split("/")[0] in allowed or rel in allowed:
            continue
        for node in ast.walk(ast.parse(p.read_text())):
            consts = []
            if isinstance(node, ast.Compare) and isinstance(node.left, ast.Constant) \
                    and isinstance(node.comparators[0], ast.Name) \
                    and node.comparators[0].id in ("argv", "args", "flags", "tokens"):
                consts = [node.left]
            elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                  and node.func.attr == "startswith" and node.args):
                a = node.args[0]
                consts = a.elts if isinstance(a, ast.Tuple) else [a]
            if any(isinstance(c, ast.Constant) and str(c.value).startswith("--") for c in consts):
                found.append(f"{rel}:{node.lineno} {ast.unparse(node)[:80]}")
    assert found == []


def test_the_prompts_cases_are_read_once(monkeypatch, tmp_path):
    """Issue 47: the ``--prompts`` cases are read once (``Asked.cases``): the rule that
    checks them against ``--reference`` and the options' field read the same reading."""
    import harness.settings.asked as asked_module
    reads = []
    real = asked_module.load_cases
    monkeypatch.setattr(asked_module, "load_cases", lambda p: reads.append(p) or real(p))
    cases = tmp_path / "cases.jsonl"
    cases.write_text('{"id": "q", "messages": [{"role": "user", "content": "Say hi."}], '
                     '"expected": "hi"}\n')
    opts = options_from_argv(["--prompts", str(cases), "--out", str(tmp_path / "o")])
    assert reads == [str(cases)]
    assert [c.id for c in opts.measure.cases] == ["q"]


def test_a_baseline_run_reads_the_baseline_once(monkeypatch, tmp_path):
    """Issue 47 point 5: a ``--baseline`` run loads the baseline's records once (as the
    options are built, ``Asked.baseline_records``): its rule and the session's gate read
    that load (``OutputsPart.baseline_records``; ``residue_sweep.Sweep.check``)."""
    import sys
    from harness.records import store
    from harness.residue_sweep import Sweep
    loads = []
    real = store.load_records

    def counted(*a, **kw):
        loads.append(a[0])
        return real(*a, **kw)
    for module in [m for n, m in list(sys.modules.items()) if n.startswith("harness")]:
        if getattr(module, "load_records", None) is real:
            monkeypatch.setattr(module, "load_records", counted)
    baseline = synth.write_jsonl(tmp_path / "base.jsonl", synth.sweep(synth.make_config(),
                                                                        range(3)))
    opts = options_from_argv(["--baseline", str(baseline), "--out", str(tmp_path / "o"),
                              "--cudagraph", "FULL_AND_PIECEWISE", "--patches", "none"])
    sweep = Sweep(opts, signals=False)
    sweep.check()
    assert len(loads) == 1
    assert len(sweep._baseline) == 6 and sweep._baseline == list(opts.outputs.baseline_records)
