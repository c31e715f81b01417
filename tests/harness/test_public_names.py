"""``harness``'s public names (docs/api.md) all import: the package resolves them lazily
from a table, and a stale entry there fails only when a user first asks for the name."""
from __future__ import annotations

import importlib

import harness


def test_every_public_name_resolves():
    fresh = importlib.reload(harness)
    missing = [n for n in fresh.__all__ if n != "__version__" and not hasattr(fresh, n)]
    assert not missing


def test_sweep_options_is_the_class_the_options_builder_returns():
    from harness.options import options_from_argv
    opts = options_from_argv(["--residues", "3", "--dry-run"])
    assert isinstance(opts, harness.SweepOptions)
