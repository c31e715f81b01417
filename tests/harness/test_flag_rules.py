"""The cross-flag rules are one table (``settings/flag_checks.RULES``, issue 34): every rule
relates real flags, and each one, broken on a command line, is the one ``UsageError``
line it says, from the options alone (no server, no sweep)."""
from __future__ import annotations

import pytest

from harness.errors import UsageError
from harness.options import options_from_argv
from harness.settings.flag_checks import RULES, Asked
from harness.settings.flag_manifest import parse_flags
from harness.settings.flag_values import parse_phases
from harness.settings.flags import FLAGS

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
}


def test_every_rule_relates_real_flags_and_has_a_broken_example():
    names = {f.name for f in FLAGS}
    for rule in RULES:
        assert set(rule.flags) <= names, rule.flags
    assert [r.flags for r in RULES if r.flags not in BROKEN] == []


@pytest.mark.parametrize("rule", RULES, ids=lambda r: "+".join(r.flags))
def test_each_rule_broken_is_its_one_line(rule, tmp_path):
    prompts = tmp_path / "cases.jsonl"
    prompts.write_text('{"id": "q", "messages": [{"role": "user", "content": "Say hi."}]}\n')
    argv = [a.replace("{prompts}", str(prompts)) for a in BROKEN[rule.flags]]
    ns, _ = parse_flags(argv)
    asked = Asked(ns, tuple(argv), parse_phases(ns.phases))
    assert rule.broken(asked)
    with pytest.raises(UsageError) as e:
        options_from_argv([*argv, "--out", str(tmp_path / "o")])
    assert str(e.value) == rule.says(asked)
