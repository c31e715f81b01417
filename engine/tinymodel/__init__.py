"""Tiny trained copy models for checking a real vLLM build in minutes.

A Qwen3.5-style GDN hybrid (layers [GDN, GDN, full attention] x 2, hidden 256, ~7.5M
parameters) and a Qwen3-style dense model (4 layers, ~5.2M), trained on a GPU to answer
the harness's prompt ("Reproduce the first N lines of the document below ...", corpus
document, padding run) with the first N document lines verbatim, and saved in the
layout vLLM 0.26.0 serves. See ``python -m engine.tinymodel --help`` and
docs/gpu-notes.md.

CPU-only pieces (tokenizer, data, geometry, layout names) import without torch; training,
saving and checking need torch + transformers (>= 5.x, with ``Qwen3_5ForCausalLM``).
"""
