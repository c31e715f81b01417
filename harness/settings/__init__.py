"""What a sweep is asked to do: every flag declared once, the values a flag may take, and
the typed sweep request (``SweepOptions``) with its matrix. ``harness/options.py`` builds it
from argv.

- ``flags.py``             ``FLAGS``: every ``sweep`` flag, its parser, checks and matrix axis
- ``flag_values.py``       what a flag's value may be: the parsers the table gives argparse
- ``asked.py``             ``Asked``: the flags as asked, each reading once (line, phases, configurations)
- ``flag_checks.py``       ``RULES``: the flags that only make sense with another one, or contradict it
- ``flag_facts.py``        what some rows of ``RULES`` compute (a ``--serve`` line's contradictions, ...)
- ``flag_manifest.py``     the flags as a manifest keeps them (versioned), and which argv wrote
- ``sweep_options.py``     ``SweepOptions`` in four typed parts (serving, measure, running, outputs)
- ``configs.py``           matrix expansion, residue selection, slots/phases/reference
- ``backend_registry.py``  ``BACKENDS``: the names ``--backend`` takes and where each lives
"""
