"""residue-lab harness: residue sweeps of LLM serving engines."""
__version__ = "0.1.0"
