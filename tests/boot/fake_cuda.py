"""A preload module that makes ``torch.cuda.is_initialized()`` true in the fork server,
as an import that touched CUDA would: the server must refuse to fork."""
import sys
import types

_torch = types.ModuleType("torch")
_torch.cuda = types.SimpleNamespace(is_initialized=lambda: True)
sys.modules["torch"] = _torch
