"""The words of ``--reference``: what a phase's answer is judged against. ``passage`` and
``cold`` judge each answer as it comes (the document's passage; the same server's cold
answer); the matrix references ``first`` and ``consensus`` judge a run's answers against
each other once it ends (``run/matrix_reference.py``); ``golden:RUN`` against another run's.
A leaf: imports nothing of the harness (``harness/names/__init__.py``)."""
from __future__ import annotations

__all__ = ["PER_ANSWER_REFERENCES", "MATRIX_REFERENCES", "GOLDEN_PREFIX"]

PER_ANSWER_REFERENCES = ("passage", "cold")
MATRIX_REFERENCES = ("first", "consensus")
GOLDEN_PREFIX = "golden:"
