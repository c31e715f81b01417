"""The one round trip of the records' typed blocks: a block read from JSON keeps every key
(the ones its class does not name in ``extra``) and the order it was written in, so
``as_dict()`` gives back exactly what was read; a block built here writes its keys in
``ORDER`` (the ``OPTIONAL`` ones only when set). ``manifest_blocks.py``, ``gate_block.py``
and ``run_timing.RunPlan`` are its users. Stdlib only.
"""
from __future__ import annotations

from dataclasses import field
from typing import Any, ClassVar, Mapping, Self

__all__ = ["Block", "written_memory", "typed_value"]


class Block:
    """What every block shares: ``from_dict`` / ``as_dict`` as the module says.
    ``NESTED``: a key whose value is itself typed: ``(cls, "list")`` a list of blocks (a
    tuple here), ``(cls, "map")`` a mapping of name to block."""

    ORDER: ClassVar[tuple[str, ...]] = ()
    OPTIONAL: ClassVar[frozenset[str]] = frozenset()
    NESTED: ClassVar[dict[str, tuple[type, str]]] = {}

    def __bool__(self) -> bool:
        # as empty as the mapping it writes: a block read as ``{}`` (``if m.explains:``)
        return bool(self.as_dict())

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Self:
        """The block as written: the keys it names typed, the rest in ``extra``."""
        known = {k: typed_value(cls.NESTED.get(k), d[k]) for k in cls.ORDER if k in d}
        obj = cls(**known, extra={k: v for k, v in d.items() if k not in cls.ORDER})
        object.__setattr__(obj, "_keys", tuple(d))
        return obj

    def as_dict(self) -> dict[str, Any]:
        """The block as written (see the module)."""
        keys = self._keys if self._keys is not None else tuple(
            k for k in self.ORDER if k not in self.OPTIONAL or getattr(self, k) is not None)
        out = {k: _plain(getattr(self, k)) if k in self.ORDER else self.extra[k]
               for k in keys if k in self.ORDER or k in self.extra}
        out.update((k, v) for k, v in self.extra.items() if k not in out)
        return out


def typed_value(nested: tuple[type, str] | None, value: Any) -> Any:
    """A value as read, typed when ``nested`` says how and it has that shape (else as read:
    a manifest this model does not describe still comes back as it was)."""
    if nested is None:
        return value
    cls, shape = nested
    if shape == "list" and isinstance(value, list) and all(isinstance(v, Mapping)
                                                           for v in value):
        return tuple(cls.from_dict(v) for v in value)
    if shape == "map" and isinstance(value, Mapping) and all(isinstance(v, Mapping)
                                                             for v in value.values()):
        return {k: cls.from_dict(v) for k, v in value.items()}
    return value


def _plain(value: Any) -> Any:
    """A typed value as JSON (the inverse of ``_typed``)."""
    if isinstance(value, Block):
        return value.as_dict()
    if isinstance(value, tuple) and all(isinstance(v, Block) for v in value):
        return [v.as_dict() for v in value]
    if isinstance(value, dict) and value and all(isinstance(v, Block) for v in value.values()):
        return {k: v.as_dict() for k, v in value.items()}
    return value


def written_memory() -> Any:
    """The private memory of a block read: its keys in the order written (None: a block
    built here, not read)."""
    return field(default=None, repr=False, compare=False)
