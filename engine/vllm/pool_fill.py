"""The KV pool filled at the speed of memory (issue 51): each storage once, a byte tile kept
on the device, one reduction per storage for the proof, and a restore of the blocks a point
was given (its dirty set) instead of the whole pool.

Why not per layer: the layers of a hybrid's KV groups are views of storages they share
(``KVCacheTensor``s: an attention layer's K/V and a GDN layer's conv/SSM state live in the
same bytes), so filling every view wrote a 20 GiB pool 3-4 times (73.3 GiB at 27B,
``reports/h200/cost/``). Here the views are resolved to their distinct storages and each
storage is written once with a periodic byte tile. The period divides every view's block
stride, so **every block of every view holds the same bytes** (a stale index reads the
same bytes whichever block it names, as the per-block tile of ``engine/vllm/poison.py``
promised) and one block's expected content is known without reading the pool: that is what
lets a restore rewrite only the blocks a point was given and still prove them.

Every byte of the tile has bit 6 clear, so no element read from it at its own alignment is
inf or NaN in fp8 (e4m3, e5m2), fp16, bf16 or fp32 (their exponent's top bit is bit 6 of
the element's high byte): attention multiplies masked values by zero, and 0 x inf is NaN.

The proof is an exact integer sum of each storage as machine words (wrapping mod 2^64 like
the hardware; addition mod 2^64 is order-free, so equal on every GPU) against the sum the
tile predicts; all the sums stay on the device until one transfer at the end: no host sync
per slab or per storage. Torch only; nothing here imports vLLM.
"""
from __future__ import annotations

import bisect
import itertools
import math
import time
from dataclasses import dataclass, field
from typing import Any, Iterable

from engine.poison_pattern import hash24

__all__ = ["Storage", "resolve", "TileCache", "fill_whole", "prove", "restore_blocks",
           "copy_bandwidth", "MAX_PERIOD"]

MAX_PERIOD = 1 << 16      # bytes of one tile: small enough to keep, large enough to vary
_MASK = 1 << 64
_BIT6_CLEAR = 0xBF


@dataclass
class View:
    tensor: Any
    block_dim: int | None     # the dim indexed by block id (None: no dim of that size)


@dataclass
class Storage:
    flat: Any                 # the whole storage as uint8 (padding bytes included)
    views: list[View] = field(default_factory=list)
    period: int = MAX_PERIOD
    salt: int = 0
    page: int | None = None   # bytes of block i's page [i*page, (i+1)*page) in every view
    blocks: int = 0

    @property
    def nbytes(self) -> int:
        return int(self.flat.numel())

    @property
    def word(self) -> int:
        """The widest word that tiles both the period and the storage."""
        return next(w for w in (8, 4, 2, 1) if self.period % w == 0 and self.nbytes % w == 0)

    @property
    def page_word(self) -> int:
        """The widest word that tiles the period, hence the page (a whole number of periods):
        the width at which a page is summed, written and proven."""
        return next(w for w in (8, 4, 2, 1) if self.page % w == 0 and self.period % w == 0)


def _block_dim(t, num_blocks: int | None) -> int | None:
    dims = [d for d, n in enumerate(t.shape) if n == num_blocks]
    return dims[0] if len(dims) == 1 else None


def _page_stride(t, page: int, num_blocks: int) -> int | None:
    """The byte stride of ``t``'s block dim where block i of the pool lies wholly inside
    page i of the storage (a dim of ``num_blocks * m`` kernel blocks, m of them a page:
    vLLM's hybrid layout, blocks first), else None."""
    es = t.element_size()
    off = es * t.storage_offset()
    for d, n in enumerate(t.shape):
        if n == 0 or n % num_blocks or es * t.stride(d) * (n // num_blocks) != page:
            continue
        inner = es + sum((k - 1) * es * abs(t.stride(j)) for j, k in enumerate(t.shape) if j != d)
        if off + (n // num_blocks - 1) * es * t.stride(d) + inner <= page:
            return es * t.stride(d)
    return None


def _paging(s: Storage, num_blocks: int | None) -> None:
    """``s.page`` and ``s.period``: every view paged (block i inside page i), or not."""
    p = MAX_PERIOD
    for v in s.views:
        if v.block_dim is not None:
            p = math.gcd(p, v.tensor.element_size() * v.tensor.stride(v.block_dim))
    page = s.nbytes // num_blocks if num_blocks and s.nbytes >= num_blocks else 0
    strides = [_page_stride(v.tensor, page, num_blocks) for v in s.views] if page else [None]
    if all(strides):
        s.page, s.blocks = page, int(num_blocks)
        for st in strides:
            p = math.gcd(p, st)
        p = math.gcd(p, page)
    s.period = p


def resolve(tensors: Iterable[Any], num_blocks: int | None) -> list[Storage]:
    """The distinct storages behind ``tensors`` (in first-seen order, so every server of one
    build numbers them alike), each with its views and a period dividing every view's block
    stride in bytes."""
    import torch
    out: dict[int, Storage] = {}
    for t in tensors:
        st = t.untyped_storage()
        key = st.data_ptr()
        if key not in out:
            flat = torch.empty(0, dtype=torch.uint8, device=t.device).set_(st)
            out[key] = Storage(flat=flat, salt=len(out))
        same = (t.storage_offset(), tuple(t.shape), tuple(t.stride()), t.dtype)
        if all((v.tensor.storage_offset(), tuple(v.tensor.shape), tuple(v.tensor.stride()),
                v.tensor.dtype) != same for v in out[key].views):
            # the GDN layers of different groups that share a storage have the same view:
            # one is enough to write and prove its bytes
            out[key].views.append(View(t, _block_dim(t, num_blocks)))
    for s in out.values():
        _paging(s, num_blocks)
    return list(out.values())


class TileCache:
    """Byte tiles made once per (device, period, seed, salt) and kept on the device, with
    their word sums (one host read per tile, at its making)."""

    def __init__(self) -> None:
        self._tiles: dict[tuple, tuple[Any, int]] = {}
        self._refs: dict[tuple, Any] = {}
        self.made = 0

    def ref(self, s: Storage, v: "View", seed: int):
        """One block of ``v`` as the fill leaves it, contiguous, kept on the device."""
        t = v.tensor
        key = (str(s.flat.device), s.salt, seed, t.storage_offset(), tuple(t.shape),
               tuple(t.stride()), t.dtype)
        if key not in self._refs:
            self._refs[key] = block_ref(s, v, self.get(s, seed)[0]).contiguous()
        return self._refs[key]

    def page(self, s: Storage, seed: int):
        """One page as the fill leaves it (the tile repeated: the period divides the page)."""
        key = ("page", str(s.flat.device), s.salt, seed, s.page, s.period)
        if key not in self._refs:
            self._refs[key] = self.get(s, seed)[0].repeat(s.page // s.period)
        return self._refs[key]

    def page_sum(self, s: Storage, seed: int, word: int) -> int:
        """One page's sum as ``word``-byte words (a host read at its first use only)."""
        key = ("page_sum", str(s.flat.device), s.period, word, seed, s.salt, s.page)
        if key not in self._refs:
            self._refs[key] = (_word_sum(self.get(s, seed)[0], word)
                               * (s.page // s.period)) % _MASK
        return self._refs[key]

    def get(self, s: Storage, seed: int) -> tuple[Any, int]:
        """The storage's tile and its word sum."""
        import torch
        key = (str(s.flat.device), s.period, s.word, seed, s.salt)
        if key not in self._tiles:
            idx = torch.arange(s.period, dtype=torch.int64, device=s.flat.device)
            tile = ((hash24(idx, seed, s.salt) >> 8) & _BIT6_CLEAR).to(torch.uint8)
            self._tiles[key] = (tile, _word_sum(tile, s.word))
            self.made += 1
        return self._tiles[key]


class _IntOf(dict):
    def __missing__(self, size: int):
        import torch
        return {8: torch.int64, 4: torch.int32, 2: torch.int16, 1: torch.uint8}[size]


_INT = _IntOf()


def _words(flat, word: int):
    return flat.view(_INT[word])


def _word_sum(flat, word: int) -> int:
    import torch
    return int(torch.sum(_words(flat, word), dtype=torch.int64).item()) % _MASK


def _expected(s: Storage, tile, tile_sum: int) -> int:
    full, tail = divmod(s.nbytes, s.period)
    return (tile_sum * full + (_word_sum(tile[:tail], s.word) if tail else 0)) % _MASK


def _device_sum(s: Storage):
    import torch
    return torch.sum(_words(s.flat, s.word), dtype=torch.int64)


def _finish(storages: list[Storage], sums: list, expected: list[int], t0: float) -> dict:
    """One transfer for every storage's sum; the proof as ``engine/vllm/poison.py`` shapes
    it (``checksum`` / ``expected`` summed mod 2^64, ``ok`` per storage)."""
    import torch
    got = [int(x) % _MASK for x in (torch.stack(sums).tolist() if sums else [])]
    bad = [i for i, (g, e) in enumerate(zip(got, expected)) if g != e]
    return {"storages": len(storages), "bytes": sum(s.nbytes for s in storages),
            "checksum": sum(got) % _MASK, "expected": sum(expected) % _MASK,
            "ok": bool(storages) and not bad, "bad_storages": bad,
            "s": round(time.perf_counter() - t0, 6)}


SEED_BYTES = 16 << 20     # the doubling fill's first stretch, written from the tile


def _fill_broadcast(s: Storage, tile) -> None:
    """The tile broadcast over the storage as machine words (one kernel; the source is
    the tile, so only the writes reach memory)."""
    w = _INT[s.word]
    full, tail = divmod(s.nbytes, s.period)
    if full:
        dst = s.flat[:full * s.period].view(w).view(full, s.period // s.word)
        dst.copy_(tile.view(w).expand(full, s.period // s.word))
    if tail:
        s.flat[full * s.period:].copy_(tile[:tail])


def _fill_doubling(s: Storage, tile) -> None:
    """A first stretch from the tile, then the storage copied onto itself in doubling
    contiguous copies (device memcpy, the kernel whose speed ``copy_bandwidth`` measures):
    every copy starts at a multiple of the period, so the pattern runs on unbroken."""
    first = min(s.nbytes, max(s.period, SEED_BYTES // s.period * s.period))
    _fill_broadcast(Storage(flat=s.flat[:first], period=s.period), tile)
    done = first
    while done < s.nbytes:
        k = min(done, s.nbytes - done)
        s.flat[done:done + k].copy_(s.flat[:k])
        done += k


# how the whole fill writes (a row each; ``doubling`` by default: its cost is the measured
# copy bandwidth's, the broadcast's depends on how well the GPU runs a strided copy)
FILL_HOWS = {"doubling": _fill_doubling, "broadcast": _fill_broadcast}


def fill_whole(storages: list[Storage], seed: int, tiles: TileCache,
               how: str = "doubling") -> dict:
    """Write every storage once with its tile, then prove every storage (one reduction
    each over the storage as int64 words, no copy of it; one host read for all)."""
    t0 = time.perf_counter()
    write = FILL_HOWS[how]
    sums, expected = [], []
    for s in storages:
        tile, tile_sum = tiles.get(s, seed)
        write(s, tile)
        sums.append(_device_sum(s))
        expected.append(_expected(s, tile, tile_sum))
    out = _finish(storages, sums, expected, t0)
    out["how"] = how
    return out


def _page_sums(s: Storage):
    """Each page's word sum ([blocks], on the device): one read of the pages."""
    import torch
    w = s.page_word
    pages = s.flat[: s.blocks * s.page].view(_INT[w]).view(s.blocks, s.page // w)
    return torch.sum(pages, dim=1, dtype=torch.int64), w


def prove(storages: list[Storage], seed: int, tiles: TileCache) -> dict:
    """The audit: every storage read once and compared with the tile's prediction, nothing
    written (a write the dirty set missed shows here). Where storages are paged, per page:
    every page holds the same bytes, so the audit names the blocks that differ."""
    import torch
    t0 = time.perf_counter()
    paged = bool(storages) and all(s.page and s.blocks * s.page == s.nbytes for s in storages)
    if not paged:
        sums, expected = [], []
        for s in storages:
            tile, tile_sum = tiles.get(s, seed)
            sums.append(_device_sum(s))
            expected.append(_expected(s, tile, tile_sum))
        return _finish(storages, sums, expected, t0)
    wrong = []
    for s in storages:
        got, w = _page_sums(s)
        want = tiles.page_sum(s, seed, w)
        wrong.append(got != (want - _MASK if want >= 1 << 63 else want))
    flat_bad = torch.cat(wrong).nonzero().flatten().tolist()        # the one host read
    starts = list(itertools.accumulate((s.blocks for s in storages), initial=0))
    bad = [(i, k - starts[i]) for k in flat_bad for i in (bisect.bisect_right(starts, k) - 1,)]
    return {"storages": len(storages), "bytes": sum(s.nbytes for s in storages),
            "by": "pages", "ok": not bad, "bad_storages": sorted({i for i, _ in bad}),
            "bad_blocks": sorted({b for _, b in bad})[:64], "bad_pages": len(bad),
            "s": round(time.perf_counter() - t0, 6)}


def block_ref(s: Storage, v: View, tile):
    """What one block of view ``v`` holds after the fill, built from the tile alone: a dim
    whose byte stride is a multiple of the period repeats the same bytes (stride 0 here)."""
    t, es = v.tensor, v.tensor.element_size()
    dims = [d for d in range(t.dim()) if d != v.block_dim]
    sizes = [int(t.shape[d]) for d in dims]
    strides = [0 if (es * t.stride(d)) % s.period == 0 else es * t.stride(d) for d in dims]
    base = (es * t.storage_offset()) % s.period
    span = base + sum((n - 1) * st for n, st in zip(sizes, strides)) + es
    buf = tile.repeat(-(-span // s.period))
    return buf.view(t.dtype).as_strided(sizes, [st // es for st in strides], base // es)


def restore_blocks(storages: list[Storage], block_ids: Iterable[int], seed: int,
                   tiles: TileCache) -> dict:
    """Rewrite the named blocks with the fill's bytes and prove them: read back against
    the tile's block, mismatches counted on the device, one host read at the end. Where
    every storage is paged, one page per block per storage; else through every view's
    block dim (``restorable`` says whether either holds)."""
    import torch
    t0 = time.perf_counter()
    ids = sorted({int(b) for b in block_ids})
    bad, written, checks = [], 0, 0
    index: dict[str, Any] = {}      # one host-to-device copy of the ids per device
    paged = all(s.page for s in storages)
    for s in storages if paged and ids else ():
        dev = str(s.flat.device)
        if dev not in index:
            index[dev] = torch.tensor(ids, dtype=torch.int64).to(s.flat.device)
        w = _INT[s.page_word]
        pages = s.flat[: s.blocks * s.page].view(w).view(s.blocks, -1)
        ref = tiles.page(s, seed).view(w)
        # one batched write and one batched proof per storage, as words: the named pages
        # only (a gather of them, not of the pool), compared exactly with the fill's page
        pages.index_copy_(0, index[dev], ref.expand(len(ids), ref.numel()))
        bad.append(torch.count_nonzero(pages.index_select(0, index[dev]) != ref))
        written += len(ids) * s.page
        checks += 1
    for s in storages if not paged else ():
        for v in s.views if ids else ():
            dev = str(v.tensor.device)
            if dev not in index:
                index[dev] = torch.tensor(ids, dtype=torch.int64).to(v.tensor.device)
            rows = v.tensor.movedim(v.block_dim, 0)
            ref = tiles.ref(s, v, seed)
            rows[index[dev]] = ref.unsqueeze(0).expand(len(ids), *ref.shape)
            as_int = _INT[ref.element_size()]   # compared as integers: bytes, not values
            bad.append(torch.sum(rows[index[dev]].view(as_int) != ref.view(as_int)))
            written += len(ids) * ref.numel() * ref.element_size()
            checks += 1
    wrong = int(torch.stack(bad).sum().item()) if bad else 0
    return {"blocks": len(ids), "by": "pages" if paged else "views", "writes": checks,
            "bytes": written, "mismatched_bytes": wrong,
            "checksum": wrong, "expected": 0, "ok": wrong == 0,
            "s": round(time.perf_counter() - t0, 6)}


def restorable(storages: list[Storage]) -> str | None:
    """Why the dirty restore cannot run on these storages (None: it can)."""
    if not storages:
        return "no KV storage found"
    if all(s.page for s in storages):
        return None
    for s in storages:
        for v in s.views:
            if v.block_dim is None:
                return (f"a view of shape {tuple(v.tensor.shape)} has no single dim of the "
                        "pool's block count")
    return None


def copy_bandwidth(device: Any, nbytes: int, repeats: int = 5) -> dict:
    """A device-to-device copy of ``nbytes``, timed with CUDA events on a GPU (the clock on a
    CPU); bytes moved count the read and the write, as a fill's do."""
    import torch
    src = torch.empty(nbytes, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    dst.copy_(src)                        # the first copy pays for lazy allocation
    cuda = src.device.type == "cuda"
    if cuda:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize()
        start.record()
    t0 = time.perf_counter()
    for _ in range(repeats):
        dst.copy_(src)
    if cuda:
        end.record()
        end.synchronize()
        secs = start.elapsed_time(end) / 1e3
    else:
        secs = time.perf_counter() - t0
    moved = 2 * nbytes * repeats
    name = torch.cuda.get_device_name(src.device) if cuda else "cpu"
    return {"bytes": nbytes, "repeats": repeats, "s": round(secs, 6), "device": name,
            "bytes_per_s": moved / secs if secs > 0 else None,
            "timer": "cuda events" if cuda else "perf_counter"}
