"""What filling the 27B shape's KV pool costs, torch only (issue 51): the old per-view fill
with its slab proof, the once-per-storage fill with one reduction per storage, the dirty
restore of one point's blocks, the audit (a whole-pool read), and the GPU's copy bandwidth
measured in the same process, with the time that bandwidth allows for a fill and its proof
(one write and one read of every byte).

The pool is laid out as vLLM lays out a Qwen3.5 hybrid's (``benchmarks/shapes/``): 16
storages (one per layer position of the 4 KV cache groups: 16 attention and 48 GDN layers),
each ``blocks x page`` bytes and shared by one attention layer (FlashAttention's ``(2, blocks,
block_size, heads, head_dim)`` with vLLM's hybrid strides: block i's K and V in page i) and
three GDN layers
(bf16 conv and fp32 SSM state, block-major: 3.27 MB of the 3.67 MB page). No vLLM needed:

    python3 benchmarks/gpu_fill_bench.py                    # on a GPU: 27B at 20 GiB
    python3 benchmarks/gpu_fill_bench.py --tiny --device cpu
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

GiB = 2**30


@dataclass(frozen=True)
class Shape:
    storages: int = 16           # layer positions per group (64 layers / 4 groups)
    gdn_per_storage: int = 3
    block_size: int = 896        # tokens per attention block (the mamba page sets it)
    kv_heads: int = 4
    head_dim: int = 256
    conv: tuple = (6, 10240)     # (kernel - 1 + 3 draft tokens, conv dim)
    ssm: tuple = (48, 128, 128)  # (value heads, key dim, value dim), float32

    @property
    def page(self) -> int:       # bytes of one block of one storage (bf16 everywhere)
        return 2 * 2 * self.block_size * self.kv_heads * self.head_dim


SHAPE_27B = Shape()
SHAPE_TINY = Shape(storages=2, block_size=16, kv_heads=1, head_dim=32, conv=(6, 16),
                   ssm=(2, 8, 8))


def build_pool(shape: Shape, pool_bytes: int, device: str):
    """The views (every layer's tensors) and the block count."""
    import torch
    blocks = max(2, pool_bytes // (shape.storages * shape.page))
    half = shape.page // 4           # elements (bf16) of one block's K or V
    conv_n = shape.conv[0] * shape.conv[1]
    views = []
    for _ in range(shape.storages):
        raw = torch.zeros(blocks * shape.page // 2, dtype=torch.bfloat16, device=device)
        # blocks first, K and V side by side in each page (vLLM's hybrid layout:
        # _update_hybrid_attention_mamba_layout), so block i is page i for every layer
        hd = shape.kv_heads * shape.head_dim
        views.append(torch.as_strided(
            raw, (2, blocks, shape.block_size, shape.kv_heads, shape.head_dim),
            (half, 2 * half, hd, shape.head_dim, 1)))
        for _ in range(shape.gdn_per_storage):
            views.append(torch.as_strided(raw, (blocks, *shape.conv), (2 * half, shape.conv[1], 1)))
            ssm_strides = (half, shape.ssm[1] * shape.ssm[2], shape.ssm[2], 1)   # fp32
            views.append(torch.as_strided(raw.view(torch.float32), (blocks, *shape.ssm),
                                          ssm_strides, conv_n // 2))
    return views, blocks


def _timed(fn, repeats: int, sync) -> tuple[float, object]:
    secs, out = [], None
    for _ in range(repeats):
        sync()
        t0 = time.perf_counter()
        out = fn()
        sync()
        secs.append(time.perf_counter() - t0)
    return statistics.median(secs), out


def run(shape: Shape, pool_gib: float, device: str, repeats: int, point_blocks: int,
        copy_mib: int) -> list[dict]:
    import torch
    from engine.vllm import pool_fill as F
    from engine.vllm.poison import fill as per_view_fill

    sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)
    views, blocks = build_pool(shape, int(pool_gib * GiB), device)
    storages, tiles = F.resolve(views, blocks), F.TileCache()
    pool = sum(s.nbytes for s in storages)
    bw = F.copy_bandwidth(device, copy_mib << 20)
    limit = 2 * pool / bw["bytes_per_s"]
    dirty = list(range(1, point_blocks + 1)) + [0]     # the null block beside them

    def old():
        return sum(per_view_fill(v, 0x5EED, salt=i, per_block=v.dim() == 4 or v.dim() == 3)["bytes"]
                   for i, v in enumerate(views))

    rows = []
    for name, fn in (("per-view fill + slab proof (old)", old),
                     ("once-per-storage fill + proof", lambda: F.fill_whole(storages, 0x5EED, tiles)),
                     ("once-per-storage fill + proof (broadcast)",
                      lambda: F.fill_whole(storages, 0x5EED, tiles, how="broadcast")),
                     ("dirty restore + proof", lambda: F.restore_blocks(storages, dirty, 0x5EED, tiles)),
                     ("audit (whole-pool proof)", lambda: F.prove(storages, 0x5EED, tiles))):
        s, out = _timed(fn, repeats, sync)
        moved = out if isinstance(out, int) else out["bytes"]
        ok = True if isinstance(out, int) else out["ok"]
        rows.append({"what": name, "s": s, "bytes": moved, "ok": ok, "x_limit": s / limit})
    rows.append({"what": "copy bandwidth limit (write + read of the pool)", "s": limit,
                 "bytes": pool, "ok": True, "x_limit": 1.0,
                 "bandwidth_gb_s": bw["bytes_per_s"] / 1e9, "timer": bw["timer"]})
    return rows


def table(rows: list[dict], pool: int, device: str, blocks: int) -> str:
    lines = [f"pool {pool / GiB:.2f} GiB on {device}, {blocks} blocks a storage; "
             f"copy bandwidth {rows[-1]['bandwidth_gb_s']:.0f} GB/s ({rows[-1]['timer']}, "
             "read + write counted)", "",
             "| what | ms | GiB moved | proven | × the limit |", "|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['what']} | {r['s'] * 1e3:.3f} | {r['bytes'] / GiB:.3f} | "
                     f"{'yes' if r['ok'] else 'NO'} | {r['x_limit']:.2f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="benchmarks/gpu_fill_bench.py", description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--pool-gib", type=float, default=None,
                    help="the pool's GiB (default 20; 0.001 with --tiny)")
    ap.add_argument("--tiny", action="store_true", help="a small shape (a CPU check)")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--point-blocks", type=int, default=18,
                    help="blocks one point is given (18 + the null block: 19 at 27B, H200 run)")
    ap.add_argument("--copy-mib", type=int, default=2048)
    a = ap.parse_args(argv)
    import torch
    if a.device.startswith("cuda") and not torch.cuda.is_available():
        print("gpu_fill_bench: error: no CUDA device here (--device cpu --tiny for a check)",
              file=sys.stderr)
        return 2
    shape = SHAPE_TINY if a.tiny else SHAPE_27B
    if a.pool_gib is None:
        a.pool_gib = 0.001 if a.tiny else 20.0
    with torch.inference_mode():
        rows = run(shape, a.pool_gib, a.device, a.repeats, a.point_blocks, a.copy_mib)
    blocks = max(2, int(a.pool_gib * GiB) // (shape.storages * shape.page))
    print(table(rows, rows[-1]["bytes"], a.device, blocks))
    return 0 if all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
