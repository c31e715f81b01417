"""Text the reports and messages are made of: GitHub-safe markdown, sentences kept as
structure, residue ranges, and the terminal's plain text. Leaves: nothing here imports
another room of the harness.

- ``ghmarkdown.py``  escaping of untrusted text, code spans, tables (GitHub's renderer)
- ``phrase.py``      ``Phrase``: a sentence as literal words, code spans, quoted values and emphasis
- ``ranges.py``      residue sets as a reader writes them: ``0–3, 5–7``
- ``plaintext.py``   aligned plain tables; what is still markdown made plain
"""
