"""engine.vllm.determinism against the installed vLLM and PyTorch: every switch it sets is a
variable they read, and with vLLM's own one set, vLLM's Autotuner replacement picks the
first config that compiles instead of timing them."""
from __future__ import annotations

import subprocess
import sys

from tests._vllm import require_module, require_vllm

require_vllm()

from engine.vllm.determinism import KERNEL_ENV, vllm_fixes_kernels  # noqa: E402


def test_every_switch_is_a_variable_vllm_or_pytorch_reads():
    import vllm.envs as envs
    inductor = require_module("torch._inductor.config")
    vllm_vars = set(envs.environment_variables)
    for var in KERNEL_ENV:
        if var.startswith("VLLM_"):
            assert var in vllm_vars, var
    assert hasattr(inductor, "deterministic")
    src = open(inductor.__file__).read()
    assert 'os.getenv("TORCHINDUCTOR_DETERMINISTIC") == "1"' in src.replace("'", '"')


def test_the_installed_vllm_fixes_kernels_and_the_switch_replaces_the_autotuner():
    """vLLM installs its replacement at import under the variable (vllm/env_override.py);
    here, on a CPU, vLLM sees no Triton driver (HAS_TRITON False) and installs nothing, so
    the replacement itself is installed by hand: Autotuner.run becomes vLLM's."""
    assert vllm_fixes_kernels() is True
    import vllm
    override = open(vllm.__file__.replace("__init__.py", "env_override.py")).read()
    at = override.index('os.environ.get("VLLM_TRITON_FORCE_FIRST_CONFIG"')
    assert "_install_force_first_config()" in override[at:at + 400]
    require_module("triton")
    code = ("import vllm.triton_utils.force_first_config as f, triton.runtime.autotuner as a; "
            "before = a.Autotuner.run.__name__; f.HAS_TRITON = True; f.install(); "
            "print(before, a.Autotuner.run.__name__)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300)
    assert done.stdout.split()[-2:] == ["run", "_run_first_valid_config"], done.stderr[-2000:]


def test_vllm_parses_the_modes_compilation_config_in_every_spelling():
    """vLLM's own parser (the one ``vllm serve`` builds) reads the mode's argv: combo kernels
    off in ``inductor_compile_config``, the line's own compilation values kept, for a JSON
    value (last one wins), ``flag=JSON``, dotted keys (which replace a JSON value in vLLM)
    and a line without any; and with both keys named, vLLM's own defaults leave them off."""
    from engine.vllm.determinism import INDUCTOR_CONFIG, fixed_compilation_argv
    from harness.serve.serve_line import _vllm_parser
    parser, why = _vllm_parser()
    assert parser is not None, why
    base = ["--model", "/m"]
    lines = {
        "json": (["-cc", '{"cudagraph_mode": "FULL"}', "--compilation-config",
                  '{"cudagraph_mode": "PIECEWISE", "inductor_compile_config": {"size_asserts": false}}'],
                 {"size_asserts": False}),
        "equals": (['--compilation-config={"cudagraph_mode": "PIECEWISE"}'], {}),
        "dotted": (["-cc.cudagraph_mode=PIECEWISE"], {}),
    }
    for name, (flags, kept) in lines.items():
        ns = parser.parse_args(base + fixed_compilation_argv(flags))
        cc = ns.compilation_config
        get = (lambda k: getattr(cc, k)) if not isinstance(cc, dict) else cc.get
        assert str(get("cudagraph_mode")).endswith("PIECEWISE"), (name, cc)
        ind = get("inductor_compile_config")   # vLLM adds keys of its own
        assert {**ind, **kept, **INDUCTOR_CONFIG} == ind, (name, cc)
    ns = parser.parse_args(base + fixed_compilation_argv([]))
    cc = ns.compilation_config
    ind = cc.inductor_compile_config if not isinstance(cc, dict) else cc["inductor_compile_config"]
    assert {**ind, **INDUCTOR_CONFIG} == ind
    from vllm.config import CompilationConfig
    built = CompilationConfig(inductor_compile_config=dict(INDUCTOR_CONFIG))
    assert built.inductor_compile_config["benchmark_combo_kernel"] is False
    assert built.inductor_compile_config["combo_kernels"] is False
