"""Ray tests skip when Ray is not installed, except where ``RESIDUE_LAB_REQUIRE_RAY=1``
(CI installs the ``ray`` extra and sets it): there a missing Ray is a failure."""
from __future__ import annotations

import os

import pytest

REQUIRE_ENV = "RESIDUE_LAB_REQUIRE_RAY"


def ray_or_skip():
    try:
        import ray
    except ImportError as e:
        ray, why = None, f"ray is not importable ({e})"
    else:
        # tests/ray itself is a namespace package called "ray" when Ray is missing
        why = None if hasattr(ray, "init") else "ray is not installed (only tests/ray found)"
    if why:
        if os.environ.get(REQUIRE_ENV) == "1":
            pytest.fail(f"{why}, and {REQUIRE_ENV}=1: install the ray extra "
                        "(pip install -e '.[ray]')", pytrace=False)
        pytest.skip(why)
    return ray


@pytest.fixture
def ray_module():
    return ray_or_skip()
