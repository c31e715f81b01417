"""A stand-in ``torch`` whose CUDA is initialised only once something touches it, as the
real one: ``fake_cuda_touch`` does (like vLLM's bundled FLA ops asking for the device name
at import). ``fake_clean_a`` / ``fake_clean_b`` import without touching it."""
import sys
import types

STATE = {"initialised": False}
_torch = types.ModuleType("torch")
_torch.cuda = types.SimpleNamespace(is_initialized=lambda: STATE["initialised"])
sys.modules["torch"] = _torch
