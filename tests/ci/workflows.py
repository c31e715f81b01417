"""The files the validators check, and the two derived views that let actionlint see them:

- the example workflows with ``uses: OWNER/residue-lab@...`` pointed at ``./`` in a scratch
  project that holds this repository's action.yml, so actionlint checks every ``with:``
  against the action's declared inputs;
- action.yml's steps as a reusable workflow (its inputs become ``workflow_call`` inputs),
  because actionlint reads workflows only: that way it checks the action's expressions,
  the inputs and runtimes of the actions it uses, and its ``run:`` steps.
"""
from __future__ import annotations

import re
import shutil
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
ACTION = ROOT / "action.yml"
EXAMPLES = sorted((ROOT / "examples" / "workflows").glob("*.yml"))
ACTIONLINT_CONFIG = ROOT / ".github" / "actionlint.yaml"
_REMOTE_SELF = re.compile(r"uses:\s*OWNER/residue-lab@[\w.-]+")


def load_action() -> dict:
    return yaml.safe_load(ACTION.read_text(encoding="utf-8"))


def action_steps_workflow(action: dict) -> dict:
    inputs = {name: {"type": "string", "required": False,
                     "default": str(spec.get("default", ""))}
              for name, spec in action["inputs"].items()}
    return {"name": "action.yml steps", "on": {"workflow_call": {"inputs": inputs}},
            "jobs": {"action": {"runs-on": "ubuntu-latest", "steps": action["runs"]["steps"]}}}


def scratch_project(dest: Path) -> Path:
    """``dest`` laid out as a repository: action.yml, its scripts, actionlint's config, and
    under .github/workflows the examples (pointed at ./) and the action's steps."""
    wf_dir = dest / ".github" / "workflows"
    wf_dir.mkdir(parents=True)
    (dest / ".git").mkdir()   # actionlint finds the project root by it
    shutil.copy(ACTION, dest / "action.yml")
    shutil.copytree(ROOT / ".github" / "actions", dest / ".github" / "actions")
    shutil.copy(ACTIONLINT_CONFIG, dest / ".github" / "actionlint.yaml")
    for wf in EXAMPLES:
        text = wf.read_text(encoding="utf-8")
        assert _REMOTE_SELF.search(text), f"{wf.name} does not use the action"
        (wf_dir / wf.name).write_text(_REMOTE_SELF.sub("uses: ./", text), encoding="utf-8")
    (wf_dir / "action-steps.yml").write_text(
        yaml.safe_dump(action_steps_workflow(load_action()), sort_keys=False), encoding="utf-8")
    return dest
