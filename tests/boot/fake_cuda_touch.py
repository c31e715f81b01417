"""Importing this initialises the fake CUDA of :mod:`tests.boot.fake_torch_lazy`."""
from tests.boot.fake_torch_lazy import STATE

STATE["initialised"] = True
