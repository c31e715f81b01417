"""A preload module that reads a variable at import, as a library reading its settings
once: a child forked with another value would keep this reading."""
import os

KNOB = os.environ.get("RESIDUE_FAKE_KNOB")
# through os.environb (bytes keys, the same mapping class): on the H200 a read like this made
# the fork server's ready message sort bytes with str and exit during start-up
BYTES_KNOB = os.environb.get(b"RESIDUE_FAKE_BYTES_KNOB")
