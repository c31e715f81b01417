"""Runs a composite action's steps the way a GitHub runner does, for a test.

Each ``run:`` step is a bash script (``bash --noprofile --norc -eo pipefail FILE``, as
GitHub runs ``shell: bash``) with the environment GitHub gives it: its own
``GITHUB_OUTPUT`` (read back into ``steps.<id>.outputs``), ``GITHUB_STEP_SUMMARY``,
``GITHUB_ACTION_PATH``, ``RUNNER_TEMP``, ``GITHUB_WORKSPACE`` and the step's ``env:``. The
``${{ }}`` expressions the action uses are evaluated (contexts ``inputs``, ``steps``,
``github``, ``runner``; ``==``, ``!=``, ``&&``, ``||``, ``!``, status functions), and an
``if:`` without a status function means ``success() && (...)``, as on GitHub. A ``uses:``
step is not run: it goes to a checker the test supplies for that action, with its
evaluated ``with:``; an action with no checker fails the run.
"""
from __future__ import annotations

import os
import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

_EXPR = re.compile(r"\$\{\{\s*(.*?)\s*\}\}", re.S)
_TOKEN = re.compile(r"\s*(?:(?P<str>'(?:[^']|'')*')|(?P<op>==|!=|&&|\|\||!|\(|\))"
                    r"|(?P<fn>always|success|failure|cancelled)\(\)|(?P<id>[A-Za-z_][\w.-]*))")
_STATUS = re.compile(r"\b(always|success|failure|cancelled)\(\)")


class ExpressionError(ValueError):
    pass


@dataclass
class StepResult:
    name: str
    ran: bool
    rc: int = 0
    stdout: str = ""
    stderr: str = ""
    outputs: dict = field(default_factory=dict)
    with_: dict = field(default_factory=dict)


class ActionRun:
    def __init__(self, action: dict, *, action_path: Path, workspace: Path, runner_temp: Path,
                 inputs: dict, github: dict, env: dict, checkers: dict[str, Callable],
                 step_timeout: float = 300.0):
        self.action = action
        self.action_path, self.workspace, self.runner_temp = action_path, workspace, runner_temp
        defaults = {k: str(v.get("default", "")) for k, v in action.get("inputs", {}).items()}
        unknown = set(inputs) - set(defaults)
        if unknown:
            raise ValueError(f"inputs the action does not declare: {sorted(unknown)}")
        self.github = github
        self.ctx = {"github": github, "runner": {"temp": str(runner_temp), "os": "Linux"},
                    "steps": {}, "env": env}
        # Input defaults may be expressions (github-token: ${{ github.token }}).
        self.ctx["inputs"] = {k: self.substitute(v) for k, v in {**defaults, **inputs}.items()}
        self.env, self.checkers, self.step_timeout = env, checkers, step_timeout
        self.summary = runner_temp / "step_summary.md"
        self.failed = False
        self.results: list[StepResult] = []

    # -- expressions -------------------------------------------------------------------------
    def _lookup(self, dotted: str):
        root, *rest = dotted.split(".")
        if root not in self.ctx:
            raise ExpressionError(f"unknown context {root!r} in {dotted!r}")
        value = self.ctx[root]
        for key in rest:
            value = value.get(key) if isinstance(value, dict) else None
        return "" if value is None else value   # GitHub: null == '' (both coerce to 0)

    def evaluate(self, expr: str):
        py, pos = [], 0
        while pos < len(expr):
            m = _TOKEN.match(expr, pos)
            if not m or m.end() == pos:
                if expr[pos:].strip() == "":
                    break
                raise ExpressionError(f"cannot evaluate {expr!r} at {expr[pos:]!r}")
            pos = m.end()
            if m["str"] is not None:
                py.append(repr(m["str"][1:-1].replace("''", "'")))
            elif m["op"]:
                py.append({"&&": " and ", "||": " or ", "!": " not "}.get(m["op"], m["op"]))
            elif m["fn"]:
                py.append({"always": "True", "success": repr(not self.failed),
                           "failure": repr(self.failed), "cancelled": "False"}[m["fn"]])
            else:
                py.append(repr(self._lookup(m["id"])))
        return eval("".join(py), {"__builtins__": {}}, {})  # noqa: S307 - our own tokens only

    def substitute(self, text) -> str:
        def one(m):
            v = self.evaluate(m.group(1))
            return ("true" if v else "false") if isinstance(v, bool) else str(v)
        if isinstance(text, bool):      # YAML `false` reaches an action as the string "false"
            return "true" if text else "false"
        return _EXPR.sub(one, str(text))

    def condition(self, step: dict) -> bool:
        cond = step.get("if")
        if cond is None:
            return not self.failed
        cond = _EXPR.sub(lambda m: m.group(1), str(cond))
        if not _STATUS.search(cond):
            cond = f"success() && ({cond})"
        return bool(self.evaluate(cond))

    # -- steps ------------------------------------------------------------------------------
    def run(self) -> list[StepResult]:
        for step in self.action["runs"]["steps"]:
            name = step.get("name") or step.get("id") or step.get("uses") or "step"
            if not self.condition(step):
                self.results.append(StepResult(name, ran=False))
                continue
            res = self._uses(step, name) if "uses" in step else self._run(step, name)
            self.results.append(res)
            if step.get("id"):
                self.ctx["steps"][step["id"]] = {"outputs": res.outputs,
                                                 "outcome": "failure" if res.rc else "success"}
            if res.rc and not step.get("continue-on-error"):
                self.failed = True
        return self.results

    def _uses(self, step: dict, name: str) -> StepResult:
        action = step["uses"].split("@", 1)[0]
        if action not in self.checkers:
            raise AssertionError(f"no checker for the action {step['uses']!r}")
        with_ = {k: self.substitute(v) for k, v in (step.get("with") or {}).items()}
        self.checkers[action](with_)
        return StepResult(name, ran=True, with_=with_)

    def _run(self, step: dict, name: str) -> StepResult:
        assert step.get("shell") == "bash", f"{name}: a composite run step needs shell: bash"
        index = len(self.results)
        script = self.runner_temp / f"step{index}.sh"
        script.write_text(step["run"], encoding="utf-8")
        output_file = self.runner_temp / f"step{index}.output"
        output_file.write_text("")
        env = {**self.env, "GITHUB_OUTPUT": str(output_file),
               "GITHUB_STEP_SUMMARY": str(self.summary),
               "GITHUB_ACTION_PATH": str(self.action_path),
               "GITHUB_WORKSPACE": str(self.workspace), "RUNNER_TEMP": str(self.runner_temp),
               "GITHUB_ACTIONS": "true", "CI": "true"}
        env.update({k: self.substitute(v) for k, v in (step.get("env") or {}).items()})
        cwd = self.workspace / self.substitute(step.get("working-directory", "."))
        proc = subprocess.run(["bash", "--noprofile", "--norc", "-eo", "pipefail", str(script)],
                              cwd=cwd, env=env, capture_output=True, text=True,
                              timeout=self.step_timeout, stdin=subprocess.DEVNULL)
        return StepResult(name, ran=True, rc=proc.returncode, stdout=proc.stdout,
                          stderr=proc.stderr, outputs=parse_outputs(output_file.read_text()))


def parse_outputs(text: str) -> dict:
    """``$GITHUB_OUTPUT``'s two forms: ``name=value`` and ``name<<DELIM`` ... ``DELIM``."""
    out, lines, i = {}, text.splitlines(), 0
    while i < len(lines):
        line = lines[i]
        if "<<" in line and ("=" not in line or line.index("<<") < line.index("=")):
            key, delim = line.split("<<", 1)
            j = lines.index(delim, i + 1)
            out[key] = "\n".join(lines[i + 1:j])
            i = j + 1
            continue
        if "=" in line:
            key, value = line.split("=", 1)
            out[key] = value
        i += 1
    return out


def clean_env(**extra: str) -> dict:
    """The test process's environment without what would make a step use this checkout
    instead of what the install step installed (PYTHONPATH, a virtualenv)."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "VIRTUAL_ENV", "GITHUB_STEP_SUMMARY", "GITHUB_OUTPUT",
                        "GITHUB_TOKEN", "GH_TOKEN", "GITHUB_REPOSITORY", "GITHUB_API_URL")}
    env.update(extra)
    return env
