"""A fake ``sglang`` package for the harness's tests: ``python -m sglang.launch_server`` with
this folder on PYTHONPATH starts ``launch_server.py``, a CPU server with SGLang 0.5.12's
endpoint shapes (tests/sglang/test_fake_sglang.py). Not SGLang: nothing here is its code."""
__version__ = "0.5.12+fake"
