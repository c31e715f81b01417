"""Weightless model shapes for ``--load-format dummy`` (``make_shapes.py``, ``README.md``)."""
