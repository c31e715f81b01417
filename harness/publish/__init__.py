"""Gating and publishing a finished sweep: the exit code (and git bisect's), what changed
against a baseline, JUnit XML and the GitHub step summary, issue comments, and every file
the user named.

- ``gate.py``         exit codes, JUnit XML, the step summary, the comment body
- ``bisect.py``       ``--bisect``: the exit code as ``git bisect run`` reads it
- ``compare.py``      what changed between two sweeps, per configuration and residue
- ``comparison.py``   ``Comparison``: that result typed (``as_dict``: ``sweep compare --json``)
- ``writers.py``      ``WRITERS``: where results go besides the results file
- ``posting.py``      ``--gh-issue N``: a report posted through ``gh`` or the REST API
- ``github_rest.py``  the GitHub REST API, without ``gh``
- ``comment_split.py`` a report as comment bodies: parts past 65,536 characters, non-ok first
- ``outfile.py``      one rule for writing a file the user named
- ``preflight.py``    checks on where outputs go, before any server starts
"""
