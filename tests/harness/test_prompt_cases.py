"""--prompts FILE: the loader's one-line errors, the pad selector, and residue targeting
of a case on the real lab tokenizer and chat template (no server)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.serve.engines import LAB_MODEL_DIR
from harness.errors import UsageError
from harness.prompts import (ChatTokenizer, PlanError, calibrate_case, load_cases,
                             plan_case_residues)
from harness.prompts.cases import CaseFileError
from tests.conftest import ROOT

EXAMPLES = ROOT / "examples" / "prompts"
LONG = "The quick brown fox jumps over the lazy dog. " * 8


def write(tmp_path: Path, *lines: str) -> str:
    p = tmp_path / "cases.jsonl"
    p.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return str(p)


def case_line(**kw) -> str:
    kw.setdefault("messages", [{"role": "user", "content": "hello"}])
    return json.dumps(kw)


@pytest.mark.parametrize("line, problem", [
    ("{not json", "not JSON: Expecting property name"),
    ("[1, 2]", "a case is a JSON object, got list"),
    (case_line(expect="x"), "unknown key 'expect' (allowed: id, messages, expected, pad)"),
    (json.dumps({"messages": []}), "\"messages\" must be a non-empty list"),
    (json.dumps({"messages": [{"content": "x"}]}), "messages[0] needs a string \"role\""),
    (json.dumps({"messages": [{"role": "user"}]}), "messages[0] (user) has no \"content\""),
    (json.dumps({"messages": [{"role": "user", "content": 3}]}),
     "messages[0] (user): \"content\" must be a string"),
    (case_line(expected=""), "\"expected\" must be a non-empty string"),
    (case_line(id="a b"), "\"id\" \"a b\" is not valid"),
    (case_line(pad=5), "\"pad\": index 5 is outside the 1 messages"),
    (case_line(pad="system"), "\"pad\": no system message to pad"),
    (case_line(pad="user:2"), "\"pad\": 'user:2': there are 1 user messages"),
    (case_line(pad="us er"), "\"pad\": 'us er' is not valid"),
    (json.dumps({"messages": [{"role": "assistant", "content": None,
                               "tool_calls": [{"id": "1"}]}]}),
     "\"pad\": no user message to pad; say which with \"pad\""),
    (json.dumps({"messages": [{"role": "user", "content": "q"},
                              {"role": "assistant", "content": None, "tool_calls": [{}]}],
                 "pad": "assistant"}), "which has no text to pad"),
])
def test_a_malformed_case_is_one_line_naming_file_and_line(tmp_path, line, problem):
    path = write(tmp_path, case_line(id="fine"), "", line)
    with pytest.raises(CaseFileError) as e:
        load_cases(path)
    msg = str(e.value)
    assert msg.startswith(f"{path}:3: ") and problem in msg and "\n" not in msg


def test_duplicate_ids_empty_files_and_unreadable_files(tmp_path):
    path = write(tmp_path, case_line(id="a"), case_line(id="a"))
    with pytest.raises(CaseFileError, match=r":2: duplicate id 'a' \(first on line 1\)"):
        load_cases(path)
    with pytest.raises(CaseFileError, match="no cases"):
        load_cases(write(tmp_path, "", "  "))
    with pytest.raises(CaseFileError, match="cannot read"):
        load_cases(str(tmp_path / "missing.jsonl"))
    (tmp_path / "bin.jsonl").write_bytes(b'{"messages": "\xff"}\n')
    with pytest.raises(CaseFileError, match=r"bin.jsonl:1: not UTF-8"):
        load_cases(str(tmp_path / "bin.jsonl"))


def test_pad_selectors_and_defaults(tmp_path):
    msgs = [{"role": "system", "content": "s"}, {"role": "user", "content": "u0"},
            {"role": "assistant", "content": "a0"}, {"role": "user", "content": "u1"},
            {"role": "user", "content": [{"type": "text", "text": "u2"}]}]
    lines = [json.dumps({"messages": msgs, "id": f"c{i}", **({"pad": p} if p != "-" else {})})
             for i, p in enumerate(["-", 0, -2, "2", "user:0", "user:-2", "assistant", None])]
    cases = load_cases(write(tmp_path, *lines))
    assert [c.pad_index for c in cases] == [4, 0, 3, 2, 1, 3, 2, 4]
    assert cases[0].id == "c0" and cases[0].line == 1
    padded = cases[0].padded(" ~", 3)   # a list content: its last text part is padded
    assert padded[4]["content"] == [{"type": "text", "text": "u2 ~ ~ ~"}]
    assert cases[2].padded(" ~", 2)[3]["content"] == "u1 ~ ~" and cases[2].messages == msgs
    assert cases[0].padded(" ~", 0) == msgs
    default_id = load_cases(write(tmp_path, "", case_line()))[0]
    assert default_id.id == "line-2"


def lab_counter():
    return ChatTokenizer.from_dir(LAB_MODEL_DIR).count_many


def test_every_residue_of_a_padded_middle_message_is_exact_on_the_lab_tokenizer(tmp_path):
    msgs = [{"role": "system", "content": LONG}, {"role": "user", "content": "first"},
            {"role": "assistant", "content": "ok"}, {"role": "user", "content": "Copy it."}]
    case = load_cases(write(tmp_path, json.dumps({"messages": msgs, "pad": 1})))[0]
    count = lab_counter()
    cal = calibrate_case(case, count, 128)
    plans = plan_case_residues(cal, range(128), 128, count)
    assert sorted(p.target_len % 128 for p in plans) == list(range(128))
    assert count([list(p.messages) for p in plans]) == [p.target_len for p in plans]
    for p in plans:   # only the padded message changes, by whole units
        assert p.messages[0] == msgs[0] and p.messages[2:] == tuple(msgs[2:])
        assert p.messages[1]["content"] == "first" + cal.pad_unit * p.pad_count
        assert p.case_id == case.id and p.prompt_sha1 and p.expected is None
    assert len({p.prompt_sha1 for p in plans}) == 128


def test_a_case_that_cannot_hit_a_residue_is_an_error_naming_it(tmp_path):
    case = load_cases(write(tmp_path, case_line(id="stuck")))[0]

    def merging(convs):  # a tokenizer on which no unit is one token per repetition
        return [len(json.dumps(c)) // 7 for c in convs]
    with pytest.raises(PlanError, match=r"case 'stuck' \(line 1\): no padding unit adds "
                                        r"exactly one templated token"):
        calibrate_case(case, merging, 128)
    count = lab_counter()
    cal = calibrate_case(case, count, 128)

    def off_by_one_at_100(convs):  # right at the probed steps, wrong at one residue
        return [n + (1 if n == cal.base_len + 100 else 0) for n in count(convs)]
    target = (cal.base_len + 100) % 128
    with pytest.raises(PlanError, match=rf"case 'stuck' \(line 1\): residue {target} cannot "
                                        r"be hit exactly"):
        plan_case_residues(cal, range(128), 128, off_by_one_at_100)


def test_the_shipped_examples_load_and_plan_on_the_lab():
    count = lab_counter()
    for name in ("chat.jsonl", "code.jsonl"):
        cases = load_cases(str(EXAMPLES / name))
        assert len(cases) >= 2 and all(c.expected for c in cases)
        for case in cases:
            cal = calibrate_case(case, count, 128)
            assert cal.base_len > 128   # long enough for a prefix-cache hit at every residue
            plan_case_residues(cal, [0, 127], 128, count)


@pytest.mark.parametrize("args, message", [
    (("--prompts", "{bad}"), "{bad}:1: not JSON"),
    (("--prompts", "{noexp}"), "{noexp}:1: case 'q' has no \"expected\", so --reference "
                               "passage cannot judge it"),
    (("--prompts", "{short}", "--dry-run"), "{short}:1: case 'tiny': "),
    (("--prompts", "{noexp}", "--case", "nope", "--reference", "cold"),
     "--case: 'nope' is not a case of {noexp} (ids: q)"),
    (("--case", "q"), "--case is only for --prompts FILE"),
])
def test_bad_prompt_files_exit_2_with_one_line_before_any_server(tmp_path, args, message, cli):
    files = {"bad": write(tmp_path, "{oops"),
             "short": str(tmp_path / "short.jsonl"), "noexp": str(tmp_path / "noexp.jsonl")}
    Path(files["short"]).write_text(case_line(id="tiny", expected="hello") + "\n")
    Path(files["noexp"]).write_text(case_line(id="q") + "\n")
    argv = [a.format(**files) for a in args]
    proc = cli.sweep(*argv, out="r", reports=None, timeout=120)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and message.format(**files) in lines[0], proc.stderr
    assert "Traceback" not in proc.stderr
    assert not list((tmp_path / "r").glob("*.jsonl"))   # nothing ran


def test_build_options_rejects_passage_for_a_case_without_expected(tmp_path):
    from harness.command.cli import build_options, sweep_parser
    path = write(tmp_path, case_line(id="q"))
    argv = ["--prompts", path]
    with pytest.raises(UsageError):
        build_options(sweep_parser().parse_args(argv), argv)
    argv += ["--reference", "cold"]
    opts = build_options(sweep_parser().parse_args(argv), argv)
    assert [c.id for c in opts.measure.cases] == ["q"] and opts.measure.prompts == path


README_PROMPTS = ("sweep --prompts examples/prompts/chat.jsonl --case chat-release-notes "
                  "--residues all --slots 2")


def test_the_readme_shows_the_done_when_command_and_its_reruns_name_the_case():
    import shlex

    from harness.command.cli import build_options, sweep_parser
    from harness.settings.configs import config_id
    from harness.serve.engines import make_adapter
    from harness.run.plan import plan_points
    assert README_PROMPTS in (ROOT / "README.md").read_text()
    argv = shlex.split(README_PROMPTS)[1:]
    opts = build_options(sweep_parser().parse_args(argv), argv)
    assert [c.id for c in opts.measure.cases] == ["chat-release-notes"]
    assert opts.measure.cases[0].pad_index == 3 and opts.measure.cases[0].messages[0]["role"] == "system"
    plan = plan_points(opts, make_adapter("lab", None))
    assert len(plan.points) == 128
    for point in (plan.points[4], plan.points[127]):
        again_argv = shlex.split(point.rerun)[1:]
        again = build_options(sweep_parser().parse_args(again_argv), again_argv)
        assert [c.id for c in again.measure.cases] == [point.case] and again.measure.residues == str(point.residue)
        (one,) = plan_points(again, make_adapter("lab", None)).points
        assert (config_id(one.cfg), one.case, one.residue) == point.key[:3] and one.key == point.key
        assert one.plan.messages == point.plan.messages


def test_the_dry_run_lists_each_case_and_counts_case_points(cli):
    out = cli("--prompts", EXAMPLES / "code.jsonl", "--residues", "0-3", "--dry-run",
              timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    lines = [ln.strip() for ln in out.stdout.splitlines() if ln.strip().startswith("case ")]
    assert len(lines) == 2
    assert lines[0].startswith(f"case code-python-retry ({EXAMPLES / 'code.jsonl'}:1): padding")
    assert "in messages[2] (assistant)" in lines[1] and "4 points, judged by its expected" in lines[1]
    assert "8 data points x 2 phases; nothing started" in out.stdout
