"""``--engine cmd``: any OpenAI-compatible server from a user template with ``{port}``,
``{gpu}``, ``{model}`` and ``{tp}`` placeholders."""
from __future__ import annotations

import asyncio
import shlex

from ..errors import UsageError
from .adapter import EngineAdapter
from .cmd_config import cmd_label, read_reported

__all__ = ["CmdAdapter"]


class CmdAdapter(EngineAdapter):
    """Any OpenAI-compatible server; the configuration is whatever the template starts, so
    the effective configuration is only what the server's endpoints report."""

    name = "cmd"
    takes_engine_args = False    # the whole command is the user's --server-cmd
    help_notes = {"--engine": "any OpenAI-compatible server --server-cmd starts"}

    def __init__(self, template: str | None, served_model_name: str | None = None,
                 served_config: dict | None = None):
        """``served_config``: the fields of ``--served-config`` as the options parsed them
        (``SweepOptions.served_fields``), never the JSON again."""
        self.served_model_name = served_model_name
        self.served_config = served_config
        # no template at all: refused by settings/flag_checks.RULES
        if "{port}" not in (template or ""):
            raise UsageError("--server-cmd: the template has no {port} placeholder")
        try:
            template.format(port=1, gpu="0", model="m", tp=1)
        except (KeyError, IndexError, ValueError) as e:
            raise UsageError(f"--server-cmd: bad placeholder {e}; allowed: {{port}}, {{gpu}}, "
                             "{model}, {tp}") from None
        try:
            shlex.split(template)
        except ValueError as e:
            raise UsageError(f"--server-cmd: cannot split the command line: {e}") from None
        self.template = template

    @classmethod
    def build(cls, *, server_cmd, served_model_name, served_config, **_):
        return cls(server_cmd, served_model_name, served_config)

    async def effective(self, client, cfg, log_text):
        """What the server runs, as ``harness.serve.cmd_config`` reads it: reported, declared,
        or "as the command ran" with the unknown fields named (never the presets)."""
        version, models = await asyncio.gather(client.version(), client.models())
        first = models[0] if models else {}
        config = read_reported(cfg, version, log_text, self.served_config)
        if first.get("max_model_len"):
            config["max_model_len"] = int(first["max_model_len"])
        status = version.get("patches") or config.pop("patch_status", None)
        return {"config": config, "engine_version": str(version.get("version", "unknown")),
                "patch_status": status, "model": first.get("id"),
                "config_label": cmd_label(cfg, config)}

    def command(self, cfg, port, slot):
        line = self.template.format(port=port, gpu=slot.gpu or "", model=cfg.model or "",
                                    tp=slot.tensor_parallel_size)
        env = {"CUDA_VISIBLE_DEVICES": slot.gpu} if slot.gpu is not None else {}
        return shlex.split(line), env

