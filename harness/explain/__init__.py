"""``sweep explain``: the explain room. Why a run's non-ok cells are what they are, by the
thread's ablation ladder, one rung per changed axis, run as one linked sweep.

- ``plan.py``  the ladder: a run's non-ok cells, their rungs (the cell's typed matrix values
  with one axis changed), ``ExplainSweep`` (a ``residue_sweep.Sweep``) that runs them
- ``cli.py``   the verb: its flags, the run, the ladder on the terminal

The ladder is rendered where every section is, in ``report/explained.py`` (a parent's
report shows its explain runs too).
"""
