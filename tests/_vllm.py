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


def require_vllm(*, module_level: bool = True):
    spec = importlib.util.find_spec("vllm")
    if spec is None or spec.origin in (None, "namespace"):
        if os.environ.get("RESIDUE_LAB_REQUIRE_VLLM") == "1":
            pytest.fail("RESIDUE_LAB_REQUIRE_VLLM=1 but vLLM is not installed "
                        "(pip install -e '.[vllm]')", pytrace=False)
        pytest.skip("vLLM is not installed", allow_module_level=module_level)
    import vllm

    return vllm
