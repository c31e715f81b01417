"""``SweepOptions`` in four typed parts (issue 47 point 2): every field in exactly one part,
read through its part everywhere, and ``replace`` routes a change to its part."""
from __future__ import annotations

import dataclasses

import pytest

from harness.options import options_from_argv
from harness.settings.sweep_options import FIELD_PART, PARTS, SweepOptions

def test_every_field_is_in_one_part_and_none_is_also_the_options_own():
    counts: dict[str, int] = {}
    for cls in PARTS.values():
        for f in dataclasses.fields(cls):
            counts[f.name] = counts.get(f.name, 0) + 1
    assert {n for n, c in counts.items() if c > 1} == set()
    own = {f.name for f in dataclasses.fields(SweepOptions)}
    assert own & set(FIELD_PART) == set()
    assert set(PARTS) <= own


def test_the_options_have_no_flat_field():
    opts = options_from_argv(["--residues", "3-5", "--dry-run"])
    assert opts.measure.residues == "3-5" and opts.running.dry_run
    with pytest.raises(AttributeError):
        opts.residues   # noqa: B018 - a read past the part fails, it is not forwarded


def test_replace_routes_each_change_to_its_part_and_keeps_the_rest():
    opts = options_from_argv(["--residues", "3-5", "--dry-run"])
    new = opts.replace(residues="7", isolation="reset", argv=("sweep",))
    assert (new.measure.residues, new.running.isolation, new.argv) == ("7", "reset", ("sweep",))
    assert new.serving == opts.serving and new.outputs == opts.outputs
    assert new.measure.context == opts.measure.context
    assert opts.measure.residues == "3-5"   # frozen: the original is unchanged
    assert new.value("isolation") == "reset"
