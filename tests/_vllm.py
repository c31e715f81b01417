"""The one guard every vLLM test uses: the real pinned vLLM, or skip — and in CI
(``RESIDUE_LAB_REQUIRE_VLLM=1``) a failure instead of a skip.

Not ``pytest.importorskip``: a directory named ``vllm`` on ``sys.path`` (``tests/vllm``,
if ``tests/`` were ever put there) imports as an empty namespace package; a real vLLM has
a file origin.
"""
from __future__ import annotations

import importlib.util
import os

import pytest


REQUIRE_ENV = "RESIDUE_LAB_REQUIRE_VLLM"


def missing(why: str, *, module_level: bool = False) -> None:
    """Skip for ``why``, or under ``RESIDUE_LAB_REQUIRE_VLLM=1`` (CI, where the ``vllm``
    extra with its torch and transformers is installed) fail: a test that cannot run there
    is a broken install, not a pass."""
    if os.environ.get(REQUIRE_ENV) == "1":
        pytest.fail(f"{REQUIRE_ENV}=1 but {why} (pip install -e '.[vllm]')", pytrace=False)
    pytest.skip(why, allow_module_level=module_level)


def require_vllm(*, module_level: bool = True):
    spec = importlib.util.find_spec("vllm")
    if spec is None or spec.origin in (None, "namespace"):
        missing("vLLM is not installed", module_level=module_level)
    import vllm

    return vllm


def require_module(name: str, *, module_level: bool = False):
    """``pytest.importorskip`` under the same gate (torch, transformers, safetensors come
    with vLLM)."""
    try:
        return importlib.import_module(name)
    except ImportError as e:
        missing(f"{name} is not importable ({e})", module_level=module_level)
