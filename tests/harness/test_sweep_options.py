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


def test_each_field_row_names_a_part_field_and_every_other_field_is_a_flag():
    """``option_fields.FIELDS`` derives only fields of the parts, and a part field without
    a row is a flag's value as parsed (its ``dest``) or keeps the part's default."""
    from harness.option_fields import FIELDS
    from harness.settings.flags import FLAGS, dest_of
    assert set(FIELDS) <= set(FIELD_PART), set(FIELDS) - set(FIELD_PART)
    dests = {dest_of(f) for f in FLAGS}
    no_source = [f.name for cls in PARTS.values() for f in dataclasses.fields(cls)
                 if f.name not in FIELDS and f.name not in dests
                 and f.default is dataclasses.MISSING
                 and f.default_factory is dataclasses.MISSING]
    assert no_source == []


def test_a_url_sweep_takes_the_live_rows_and_a_started_one_its_flags():
    opts = options_from_argv(["--url", "http://127.0.0.1:9/v1", "--phases", "cold"])
    assert (opts.running.isolation, opts.running.backend) == ("live", "live")
    assert opts.running.live is not None and opts.serving.configs == ()
    started = options_from_argv(["--isolation", "reset", "--slots", "2"])
    assert (started.running.isolation, started.running.backend) == ("reset", "local")
    assert len(started.running.slots) == 2 and started.running.live is None


def test_a_configurations_residues_are_decided_once_and_every_asker_shares_them():
    """Issue 47 point 5: the options, ``--url``, explain's rungs, the plan and the dry run
    all ask ``settings/configs.choose_residues``; a configuration's choice is made once."""
    from harness.settings.configs import residue_choice
    opts = options_from_argv(["--residues", "3-5"])
    cfg = opts.serving.configs[0]
    first, again = residue_choice(opts.measure, cfg), residue_choice(opts.measure, cfg)
    assert first is again and first.residues == (3, 4, 5)
    with pytest.raises(dataclasses.FrozenInstanceError):
        first.residues = ()
