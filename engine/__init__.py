"""The engine side: what a sweep runs against, and what the harness and the engines share.

Below the harness: nothing here imports ``harness/`` (tests/harness/test_layout.py).

- ``presets.py``        the launcher presets (SPEC / CTX / draft tokens) as one table, for
                        every engine adapter: ``resolve`` -> ``ServingConfig``, with reasons
- ``poison_pattern.py`` the poison fill's pattern (issue 32), one definition for the lab's
                        state slots and a vLLM worker's KV pool
- ``prompts/``          the prompt text both sides share: corpus, templated length, residue
                        targeting (a leaf)
- ``lab/``              the CPU lab engine: Bug B, #18 and the boot-capacity failure as real
                        mechanisms behind an OpenAI-compatible server
- ``vllm/``             the real serving stack: launch commands, effective configuration
                        and boot split from its log, the patch plugin
- ``prefork/``          a pre-imported launcher: one parent imports once, forks each server
- ``tinymodel/``        tiny trained models for checking a real vLLM build in minutes
"""
