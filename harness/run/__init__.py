"""The run layer: plan the data points, run one point, drive a sweep, type its records.

- ``records``: the phase record model, schema version and vocabulary;
- ``plan``: data points, the sweep plan, golden answers, probe planning;
- ``point``: ``PointRunner``, the per-point code every backend runs;
- ``driver``: ``Driver``, the only writer of a run's store, manifest and counters.

``run/*`` never imports ``harness.backends``: backends talk to the driver.
"""

__all__ = ["records", "plan", "point", "driver"]
