"""Judging: one answer's verdict, where a wrong answer leaves its reference, and the Bug B
rule of which residues can break (the verdicts' and phases' names: ``harness/names/``).

- ``verdict.py``     one answer judged: sha1, verbatim n/N, repeats, the verdict
- ``divergence.py``  where a non-ok answer leaves its reference, and how close it came
- ``bugb.py``        the rule: the residues a configuration can break at (DESIGN §1)
"""
