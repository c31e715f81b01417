"""A pre-imported launcher: one parent imports a module list once (torch, vLLM, ...)
without touching CUDA and forks one child per server, so a server pays for its own work
(CUDA init, weights, graphs) but not for Python imports. Generic: any ``-m module`` or
``module:function`` entry; the lab engine tests it on CPU, :mod:`engine.vllm.prefork`
is the vLLM entry. Falls back to a plain process where a fork cannot be used.

    with ForkServer(["engine.lab.cli"], log_path="fs.log") as fs:
        child = start_child(plain_argv, env=env, log_path="srv.log", server=fs,
                            entry="-m engine.lab", child_argv=argv)
        ...
        child.kill()

- ``_client.py``   the client side: start a fork server, ask it for children, fall back to
  a plain process; ``ForkedChild`` and ``PlainChild`` share one interface
- ``_server.py``   the fork server (``python -m engine.prefork``): imports once, forks a
  child per request over JSON lines; refuses to fork once CUDA is initialised
- ``_proctree.py`` process trees by session: a server's whole tree is its session
  (``session_pids``, ``kill_session``), which re-parenting to init does not break
"""
from ._client import ForkedChild, ForkServer, ForkServerUnavailable, PlainChild, start_child
from ._proctree import alive, die_with_parent, kill_session, session_pids

__all__ = ["ForkServer", "ForkServerUnavailable", "ForkedChild", "PlainChild", "alive",
           "die_with_parent", "kill_session", "session_pids", "start_child"]
