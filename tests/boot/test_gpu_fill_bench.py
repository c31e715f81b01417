"""benchmarks/gpu_fill_bench.py on CPU at a tiny size: the 27B layout's storages are shared
by their layers, every way of filling is proven, and the table has every row."""
from __future__ import annotations

import pytest

from tests._vllm import require_module
torch = require_module("torch", module_level=True)   # CI has it (vLLM); a new user may not

from benchmarks import gpu_fill_bench as B
from engine.vllm import pool_fill as F


def test_the_27b_layout_shares_each_storage_among_four_layers():
    s = B.SHAPE_27B
    assert s.page == 3_670_016                                  # benchmarks/shapes' page
    assert 2 * s.conv[0] * s.conv[1] + 4 * 48 * 128 * 128 == 3_268_608   # the mamba page
    views, blocks = B.build_pool(B.SHAPE_TINY, 1 << 20, "cpu")
    storages = F.resolve(views, blocks)
    assert len(storages) == B.SHAPE_TINY.storages
    assert len(views) == B.SHAPE_TINY.storages * (1 + 2 * B.SHAPE_TINY.gdn_per_storage)
    # the GDN layers sharing a storage have the same views: written and proven once
    assert all(len(st.views) == 3 for st in storages)
    assert F.restorable(storages) is None and storages[0].page == B.SHAPE_TINY.page


def test_the_bench_runs_on_cpu_and_proves_every_fill(capsys):
    assert B.main(["--tiny", "--device", "cpu", "--pool-gib", "0.001", "--copy-mib", "1",
                   "--repeats", "1"]) == 0
    out = capsys.readouterr().out
    for row in ("per-view fill", "once-per-storage", "dirty restore", "audit", "limit"):
        assert row in out
    assert "NO" not in out


def test_no_cuda_is_one_line_and_exit_2(capsys):
    if torch.cuda.is_available():
        pytest.skip("a CUDA device is here")
    assert B.main(["--device", "cuda"]) == 2
    assert capsys.readouterr().err.count("\n") == 1
