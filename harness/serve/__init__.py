"""Servers and engines: how a configuration becomes a server, what the server says it is,
and what is done to a running one (reset, restore, poison). Below the pool
(``harness/server_pool.py``) and the run; imports nothing of the harness but ``errors`` and
the names (``harness/names/``).

- ``engines.py``      ``ADAPTERS``: the registry, one adapter class per engine (an adapter's
                      module is mapped by its entry there; the three below are named too)
- ``adapter.py``      ``EngineAdapter``: what every adapter is (the seam), ``PreforkSpec``
- ``lab_adapter.py``  ``--engine lab``: the CPU lab engine
- ``vllm_adapter.py`` ``--engine vllm``: ``vllm serve`` from the presets, plugin, sleep, poison
- ``cmd_adapter.py``  ``--engine cmd``: any OpenAI-compatible server from a template
- ``engine_help.py``  an engine's facts as ``sweep --help`` says them, asked of its adapter
- ``serve_line.py``   ``--serve 'vllm serve MODEL ...'``: the user's own server line
- ``cmd_config.py``   what an ``--engine cmd`` server runs: read, declared, or unknown
- ``dummy_weights.py`` vLLM's ``--load-format dummy`` found in a command, however spelled
- ``client.py``       the async client for one OpenAI-compatible server
- ``live_target.py``  ``LiveTarget``: ``--url``'s server as the options take it, nothing sent
- ``facts.py``        ``ServerFacts``: what a point's records carry about its server, typed
- ``isolation.py``    ``MACHINERY``: what an ``--isolation`` value does to a server
- ``restore.py``      a running server returned to its just-booted state, each step proven
- ``poison.py``       ``--poison``: the fill of the memory a stale read can reach
- ``slots.py``        where a server runs: a CPU slot, a GPU, a group of GPUs
- ``gpu_info.py``     which GPU a server ran on, as ``nvidia-smi`` names it (issue 48)
- ``orphans.py``      servers die with the sweep, or are ended by the next one
"""
