"""Markdown reports of residue sweeps: thread-style tables, safe to paste into GitHub.

Input: phase records (docs/records.md) from one or more results files, and optionally
their run manifests. Output: one GitHub-flavoured markdown document with

- the residue × configuration table (phases as columns for one configuration, one column
  per configuration × phase when several were swept); a clean cell is the verbatim
  ``n/N``, a bad cell is bold and says what happened in the thread's words; long runs of
  clean rows fold into one line unless ``full=True``;
- a footnote table with the 12-hex sha1 (and excerpt) of every non-ok cell;
- a summary per configuration: coverage of the modulus, clean / broken residues, what the
  Bug B rule predicts and whether the sweep agrees, the miss probability of a partial
  sweep, the cache-hit granularity when the modulus cannot resolve it, the effective
  configuration and the command lines that rerun its cells;
- a ladder view when the configurations differ in one or two dimensions only;
- provenance (runs, engine, versions, patch set, slots, nodes, isolation, dates).

Layout:

- ``model``: records grouped into configurations, and their cells;
- ``bugb_analysis``: the rule of ``harness.judge.bugb`` against the records;
- ``cells``, ``sections`` and ``provenance``: the pieces (what one cell says; a section;
  the provenance table); ``columns``: the results table's declared columns after its
  phase cells (``COLUMNS``, read by ``sections`` and the legend);
- ``render``: the document; ``terminal``: the short version a sweep prints at its end;
- ``engine_notice``: the opening lines (the CPU lab, not vLLM; a live server, not fresh ones);
- ``interrupted``: a run that did not finish, said where a reader looks first;
- ``nodes``: the by-node section; ``cases``: a ``--prompts`` run grouped by case;
- ``divergence``: why a bad cell is bad (first divergence, reference, final chunk);
  ``explained``: the ladder of ``sweep explain``;
- ``traffic``: a cell's "beside >= N others" and a configuration's "Other traffic" line
  (``--url`` beside other clients' requests);
- ``auto``, ``restore``, ``load``, ``baseline``, ``timing``: the sections of
  ``--isolation auto``, ``--isolation restore``, ``--load``, ``--baseline`` and where the
  wall time went.

Everything a server sent is untrusted and goes through :mod:`harness.text.ghmarkdown`.
"""
from __future__ import annotations

from ..judge.bugb import Prediction
from ..text.ranges import fmt_ranges, residues_phrase
from .bugb_analysis import agreement, config_hit_granularity, predict_bug_b
from .cells import cell_markdown, cell_phrase, failure_gist
from .model import (Cell, ConfigData, describe_dim, fmt_percent, group_configs, miss_probability,
                    miss_sentence, sha12, varying_fields)
from .nodes import by_node, render_nodes
from .render import load_inputs, render_markdown, write_report
from .sections import short_labels
from .terminal import render_terminal, terminal_width

__all__ = ["render_markdown", "write_report", "load_inputs", "Cell", "ConfigData", "group_configs",
           "Prediction", "predict_bug_b", "agreement", "config_hit_granularity",
           "cell_phrase", "cell_markdown", "failure_gist", "fmt_ranges", "residues_phrase",
           "fmt_percent", "miss_probability", "miss_sentence", "sha12", "describe_dim",
           "varying_fields", "short_labels", "by_node", "render_nodes", "render_terminal", "terminal_width"]
