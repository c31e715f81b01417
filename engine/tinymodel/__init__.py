"""Tiny trained copy models for checking a real vLLM build in minutes.

A Qwen3.5-style GDN hybrid (layers [GDN, GDN, full attention] x 2, hidden 256, ~7.5M
parameters) and a Qwen3-style dense model (4 layers, ~5.2M), trained on a GPU to answer
the harness's prompt ("Reproduce the first N lines of the document below ...", corpus
document, padding run) with the first N document lines verbatim, and saved in the
layout vLLM 0.26.0 serves. See ``python -m engine.tinymodel --help`` and
docs/gpu-notes.md.

CPU-only pieces (tokenizer, data, geometry, layout names) import without torch; training,
saving and checking need torch + transformers (>= 5.x, with ``Qwen3_5ForCausalLM``).

- ``models.py``     model geometry (pure data) and the checkpoint layouts vLLM 0.26.0 serves
- ``tokenizer.py``  the byte-level BPE tokenizer with a ChatML template, trained on the corpus
- ``data.py``       training / eval conversations in the harness's exact prompt shape
- ``layout.py``     write / read the served checkpoint layout (config, weights, tokenizer)
- ``train.py``      GPU curriculum training of the copy models
- ``mtp.py``        the hybrid's MTP head in the layout vLLM's ``Qwen3_5MTP`` loads
- ``mtp_head.py``   its PyTorch modules (imported when a head is built)
- ``mtp_train.py``  train the MTP head on the frozen hybrid; estimate vLLM's acceptance
- ``dflash_model.py`` a DFlash drafter computing what vLLM's ``DFlashQwen3ForCausalLM`` does
- ``dflash_train.py`` train it against the frozen hybrid; its teacher-forced acceptance
- ``dflash_kv_groups.py`` which drafter layer counts vLLM can serve for a hybrid target (its
  one-KV-cache-group rule, ``vllm/v1/core/kv_cache_utils.py``)
- ``probe.py``      serve tiny models with a real vLLM, send harness-planned prompts twice
"""
