"""residue-lab harness: residue sweeps of LLM serving engines.

The Python API (docs/api.md)::

    from harness import Sweep, options_from_argv
    result = Sweep(options_from_argv(["--residues", "3-5", "--slots", "2"])).run()
    result.exit_code, result.not_ok, result.report_path

Names are imported when first used: ``import harness`` stays cheap, so the ``sweep``
script's signal handlers are in before anything heavy loads (``harness.entry``).

Module map: docs/architecture.md, "Layers" (every module is on it:
tests/harness/test_layout.py).
"""
__version__ = "0.1.0"

__all__ = ["Sweep", "SweepOptions", "RunResult", "Callbacks", "options_from_argv",
           "ExitCode", "HarnessError", "UsageError", "CannotRun", "__version__"]

_WHERE = {"Sweep": "residue_sweep", "RunResult": "residue_sweep", "Callbacks": "residue_sweep",
          "SweepOptions": "settings.sweep_options", "options_from_argv": "options", "ExitCode": "errors",
          "HarnessError": "errors", "UsageError": "errors", "CannotRun": "errors"}


def __getattr__(name: str):
    if name in _WHERE:
        from importlib import import_module
        return getattr(import_module(f".{_WHERE[name]}", __name__), name)
    raise AttributeError(f"module 'harness' has no attribute {name!r}")
