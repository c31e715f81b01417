"""Where each prefill row of a batch reads its tokens: the batch's flat input buffer
(sgl-project/sglang #22819's shape: corrupt only beside other requests in one batch, when a
length equals the page size; a row of the batch read at the wrong offset).

Mirrors ``vllm/v1/worker/gpu_model_runner.py`` ``_prepare_inputs`` (the scheduled tokens of
every request gathered into one flat ``input_ids`` buffer, each row at its
``query_start_loc``) with a page-padded layout, as sglang's paged ``alloc_extend`` /
``write_req_to_token`` lay each request out on whole pages: the writer places row i at
the sum of the pages of the rows before it, and the kernel reads row i at the sum of
the pages it computes for them.

The writer counts ``n // page + 1`` pages for a row of n tokens ("the full pages, plus
the partial one"), which is one page too many when n is a whole number of pages; the
reader counts ``ceil(n / page)``. Row 0 starts at 0 either way, so a lone prefill is never
affected. A prefill row batched after a row whose chunk is a whole number of blocks reads
a page of padding (token 0, ``<|endoftext|>``) and then its own tokens one page late: its
KV slots and its state get the wrong tokens, so the turn header is gone and the answer is
wrong. Decode rows are not laid out here.

``--patches prefill-row-offsets`` makes the writer count ``ceil(n / page)`` pages as the
reader does.
"""
from __future__ import annotations

import numpy as np

__all__ = ["PATCH", "read_rows"]

PATCH = "prefill-row-offsets"


def _pages_written(n: int, page: int, patched: bool) -> int:
    return -(-n // page) if patched else n // page + 1


def read_rows(rows: list[np.ndarray], page: int, patched: bool) -> list[np.ndarray]:
    """The tokens each prefill row reads back from the batch's flat buffer."""
    if len(rows) < 2:
        return rows
    write_at, off = [], 0
    for t in rows:
        write_at.append(off)
        off += _pages_written(len(t), page, patched) * page
    buf = np.zeros(off + page, dtype=np.int32)   # padding holds token 0
    for t, w in zip(rows, write_at):
        buf[w:w + len(t)] = t
    out, off = [], 0
    for t in rows:
        out.append(buf[off:off + len(t)])
        off += -(-len(t) // page) * page
    return out
