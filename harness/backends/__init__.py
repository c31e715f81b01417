"""Backends: where data points run (local slots are residue_sweep.Sweep itself)."""
