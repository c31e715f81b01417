"""What an ``--engine cmd`` server runs: read from the server, declared, or unknown.

A cmd server is whatever command the user gave; the harness's presets (SPEC, CTX, graph
mode, patches) do not reach it, so they must never label it (issue 27: a lab server run
as a cmd with FULL_AND_PIECEWISE and no patches was reported as ``PIECEWISE patches=all``
and the rule line then blamed "another bug"). Its configuration is, in this order:

1. what the server reports: the lab's ``/version`` ``effective_config``, or vLLM's startup
   log (``engine.vllm.effective.parse_effective_config``);
2. what the user declares with ``--served-config JSON`` (checked against the server's
   report where there is one: the report wins, and the records name the difference);
3. otherwise unknown: the configuration is labelled "as the command ran", the fields the
   Bug B rule needs are named in ``not_reported``, and the rule says it cannot be checked.
"""
from __future__ import annotations

import dataclasses
import json
from typing import Any, Mapping

from engine.presets import CUDAGRAPH_MODES, ServingConfig

from ..errors import UsageError

__all__ = ["KNOWN", "DECLARED_NOTE", "AS_RAN", "parse_served_config", "declare",
           "read_reported", "cmd_label", "normalise_reported"]

# What the rule needs to name Bug B's residues, and the other fields a config may declare.
KNOWN = ("method", "draft_tokens", "cudagraph_mode", "prefix_caching", "block_size",
         "prefix_match_unit", "patches")
_DECLARABLE = KNOWN + ("max_model_len", "max_num_batched_tokens", "geometry")
DECLARED_NOTE = "configuration declared by --served-config"
AS_RAN = "as the command ran"


def parse_served_config(text: str | None) -> dict[str, Any] | None:
    """``--served-config JSON`` as configuration fields; ``UsageError`` naming what is
    wrong. vLLM's spellings are accepted (``speculative_config``, ``enable_prefix_caching``,
    ``compilation_config.cudagraph_mode``)."""
    if text is None:
        return None
    try:
        raw = json.loads(text)
    except ValueError as e:
        raise UsageError(f"--served-config: not JSON ({e})") from None
    if not isinstance(raw, dict):
        raise UsageError("--served-config: must be a JSON object, e.g. "
                         "'{\"method\": \"mtp\", \"draft_tokens\": 3, \"cudagraph_mode\": "
                         "\"FULL_AND_PIECEWISE\", \"patches\": \"none\"}'")
    raw = dict(raw)
    cc = raw.pop("compilation_config", None)
    if isinstance(cc, dict) and "cudagraph_mode" in cc:
        raw.setdefault("cudagraph_mode", cc["cudagraph_mode"])
    out = _normalise(raw)
    unknown = sorted(set(out) - set(_DECLARABLE))
    if unknown:
        raise UsageError(f"--served-config: unknown field(s) {', '.join(unknown)}; allowed: "
                         f"{', '.join(_DECLARABLE)} (or vLLM's speculative_config, "
                         "enable_prefix_caching)")
    mode = out.get("cudagraph_mode")
    if mode is not None and mode not in CUDAGRAPH_MODES:
        raise UsageError(f"--served-config: cudagraph_mode {mode!r} is not one of "
                         f"{', '.join(CUDAGRAPH_MODES)}")
    for key in ("draft_tokens", "block_size", "prefix_match_unit", "max_model_len",
                "max_num_batched_tokens"):
        if out.get(key) is not None and (isinstance(out[key], bool)
                                         or not isinstance(out[key], int) or out[key] < 0):
            raise UsageError(f"--served-config: {key} must be a non-negative integer")
    return out


def normalise_reported(rep: dict[str, Any]) -> dict[str, Any]:
    """Map an engine's self-report onto ServingConfig field names (and keep extras)."""
    out: dict[str, Any] = {}
    aliases = {"enable_prefix_caching": "prefix_caching", "hash_unit": "prefix_match_unit",
               "effective_hash_unit": "effective_hash_unit"}
    for k, v in rep.items():
        out[aliases.get(k, k)] = v
    spec = rep.get("speculative_config")
    if isinstance(spec, dict):
        out["method"] = spec.get("method")
        out["draft_tokens"] = int(spec.get("num_speculative_tokens") or 0)
    elif "speculative_config" in rep and spec is None:
        out["method"], out["draft_tokens"] = None, 0
    out.pop("speculative_config", None)
    return out


def _normalise(rep: Mapping[str, Any]) -> dict[str, Any]:
    out = normalise_reported(dict(rep))
    if "spec" in out:   # a preset name given for the method
        spec = out.pop("spec")
        out.setdefault("method", None if spec in (None, "none") else spec)
    if out.get("method") is None and "method" in out:
        out["draft_tokens"] = 0
    return out


def declare(cfg: ServingConfig, served: Mapping[str, Any] | None) -> ServingConfig:
    """``cfg`` with the declared fields in place of the preset's (before any server)."""
    if not served:
        return cfg
    values = {k: v for k, v in served.items() if k in _DECLARABLE}
    if "method" in values:
        values["spec"] = values["method"] or "none"
        values.setdefault("draft_tokens", 0 if not values["method"] else cfg.draft_tokens)
    if values.get("patches") is None:
        values.pop("patches", None)
    return dataclasses.replace(cfg, **values, notes=(*cfg.notes, DECLARED_NOTE))


def read_reported(cfg: ServingConfig, version: Mapping[str, Any], log_text: str,
                  served: Mapping[str, Any] | None) -> dict[str, Any]:
    """The effective configuration of a booted cmd server (a record's ``config``)."""
    reported: dict[str, Any] = {}
    source = None
    if isinstance(version.get("effective_config"), dict):
        reported, source = _normalise(version["effective_config"]), "the server's /version"
    else:
        from engine.vllm.effective import parse_effective_config
        try:
            parsed = parse_effective_config(log_text)
        except Exception:   # not a vLLM log, or one we cannot read: nothing reported
            parsed = {}
        if "vllm_version" in parsed:
            reported, source = _normalise(parsed), "the server's log (vLLM)"
    config: dict[str, Any] = {"engine": "cmd", "model": cfg.model}
    if served:
        config.update(served)
        source = f"{source} and --served-config" if source else "--served-config"
    config.update(reported)
    differs = sorted(k for k in (served or {}) if k in reported and reported[k] != served[k])
    if differs:   # the server's word wins; the records say where the declaration was wrong
        config["declared_differs"] = [f"{k}: --served-config says {served[k]!r}, the server "
                                      f"reports {reported[k]!r}" for k in differs]
    config["config_source"] = source or AS_RAN
    missing = [k for k in KNOWN if config.get(k) is None
               and not (k == "draft_tokens" and "method" in config)
               and not (k == "prefix_match_unit" and "prefix_match_unit" in config)]
    if missing:
        config["not_reported"] = missing
    return config


def cmd_label(cfg: ServingConfig, config: Mapping[str, Any] | None) -> str:
    """The label of a cmd configuration: from its effective ``config`` when the server's
    fields are known, else the declared configuration's, else "as the command ran"."""
    if config and config.get("config_source") not in (None, AS_RAN):
        parts = [f"cmd: SPEC={config.get('method') or 'none'}"]
        if config.get("method"):
            parts.append(f"k={config.get('draft_tokens')}")
        parts.append(str(config.get("cudagraph_mode") or "graph mode ?"))
        if config.get("prefix_caching") is False:
            parts.append("no-prefix-cache")
        elif config.get("block_size"):
            parts.append(f"block={config['block_size']} unit="
                         f"{config.get('prefix_match_unit') or '-'}")
        parts.append(f"patches={config.get('patches') or '?'}")
        return " ".join(parts) + f" (from {config['config_source']})"
    if DECLARED_NOTE in cfg.notes:
        return f"cmd: {cfg.label()} (from --served-config)"
    return f"cmd: {cfg.model or 'server'} {AS_RAN}"
