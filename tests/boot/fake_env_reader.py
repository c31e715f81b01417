"""A preload module that reads a variable at import, as a library reading its settings
once: a child forked with another value would keep this reading."""
import os

KNOB = os.environ.get("RESIDUE_FAKE_KNOB")
