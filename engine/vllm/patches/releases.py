"""Which vLLM release runs which model runner, and whose uniform-decode dispatch checks for
a prefill: the facts behind the report's rule line, read in each release's wheel.

Every row was read in the x86_64 wheel's sources (files named in ``docs/vllm-stack.md``):
``vllm/config/vllm.py`` (``VllmConfig.use_v2_model_runner`` and the V2 unsupported
features), ``vllm/envs.py`` (``VLLM_USE_V2_MODEL_RUNNER``), ``vllm/v1/worker/
gpu_model_runner.py`` (V1 ``_is_uniform_decode``) and ``vllm/v1/worker/gpu/model_runner.py``
+ ``vllm/v1/worker/utils.py`` / ``gpu/cudagraph_utils.py`` (the V2 classifier). A release
between two read ones is answered from the nearest read release below it, and says so.

Importing this module does not import vLLM.
"""
from __future__ import annotations

from dataclasses import dataclass

#: vLLM's switch (vllm/envs.py, same name and parser in 0.26.0 .. 0.33.0): unset = the
#: release decides; "1"/"0" force V2/V1 (``bool(int(value))``: any other string fails).
RUNNER_ENV = "VLLM_USE_V2_MODEL_RUNNER"
RUNNERS = ("v1", "v2", "auto")
METHODS = ("ngram", "mtp", "dflash", "none")


@dataclass(frozen=True)
class Release:
    version: str
    v1_prefill_check: str | None   # how V1's dispatch sees a prefill (None: shape only)
    v2_prefill_check: str | None   # how V2's dispatch sees a prefill (None: shape only)
    hybrid_default_v2: bool        # hybrid target, no override: V2 unless unsupported
    dense_default_v2: bool         # dense non-MoE target: V2 unless unsupported
    v2_unsupported_methods: tuple[str, ...]  # methods that fall back to V1 under auto
    sliding_window_assert: bool    # find_longest_cache_hit still asserts the alignment (#18)
    note: str = ""

    def expected_gates(self) -> dict[str, str]:
        """The plugin's gate word per target on this release (what CI checks)."""
        return {
            "prefill-discriminator/v1-runner":
                "not-needed" if self.v1_prefill_check else "applied",
            "prefill-discriminator/v2-runner":
                "not-needed" if self.v2_prefill_check else "applied",
            "sliding-window-guard/sliding-window-manager":
                "applied" if self.sliding_window_assert else "not-needed",
        }


RELEASES: tuple[Release, ...] = (
    Release("0.26.0", None, None, False, True, ("ngram",), True,
            "hybrid -> V1 unless dflash with a mixed sliding/full drafter"),
    Release("0.27.1", None, None, False, True, ("ngram",), True,
            "hybrid -> V1 unless its architecture is in DEFAULT_V2_MODEL_RUNNER_ARCHITECTURES"
            " or dflash with a mixed sliding/full drafter"),
    Release("0.28.0", None, "has_prefill", False, True, ("ngram",), True,
            "V2 classifier get_uniform_decode_token_count(..., has_prefill) (PR #51865);"
            " hybrid -> V1 unless a DFlash2 or mixed sliding/full drafter"),
    Release("0.29.0", None, "has_prefill", True, True, ("ngram",), True,
            "V2 for every model on CUDA unless a feature is unsupported"),
    Release("0.30.0", None, "has_prefill", True, True, ("ngram",), False),
    Release("0.31.0", None, "decode_graph_eligible", True, True, ("ngram",), False,
            "V2 classifier takes decode_graph_eligible instead of has_prefill"),
    Release("0.32.0", None, "decode_graph_eligible", True, True, (), False,
            "ngram runs on V2"),
    Release("0.33.0", None, "decode_graph_eligible", True, True, (), False),
)


def _key(version: str) -> tuple[int, ...]:
    parts = []
    for p in version.split("+")[0].split("."):
        digits = "".join(ch for ch in p if ch.isdigit())
        parts.append(int(digits) if digits else 0)
    return tuple(parts)


def release_facts(version: str) -> tuple[Release, bool]:
    """(the facts that hold for ``version``, whether that exact release was read).

    Raises ValueError below the oldest release read (0.26.0): nothing is known there.
    """
    key = _key(version)
    below = [r for r in RELEASES if _key(r.version) <= key]
    if not below:
        raise ValueError(f"vLLM {version} is older than any release read "
                         f"({RELEASES[0].version})")
    best = max(below, key=lambda r: _key(r.version))
    return best, _key(best.version) == key


def default_runner(version: str, method: str, *, hybrid: bool) -> str:
    """The runner ``auto`` gets (``v1``/``v2``) for this release, method and model kind.

    Covers the common case (a generate model on CUDA with Triton, no context parallelism,
    no unsupported feature besides the method); the server's log is the authority and
    :func:`engine.vllm.effective.parse_effective_config` records what it ran on.
    """
    rel, _ = release_facts(version)
    if method not in METHODS:
        raise ValueError(f"unknown method {method!r}; known: {', '.join(METHODS)}")
    default_v2 = rel.hybrid_default_v2 if hybrid else rel.dense_default_v2
    if not default_v2 or method in rel.v2_unsupported_methods:
        return "v1"
    return "v2"


@dataclass(frozen=True)
class DispatchRule:
    runner: str                  # v1 | v2 (auto resolved)
    prefill_check: bool          # the uniform-decode dispatch can tell a prefill tail
    mechanism: str | None        # has_prefill | decode_graph_eligible | None
    release_read: str            # the release whose source the answer comes from
    exact: bool                  # that release is the one asked about

    def line(self) -> str:
        how = f"checks for a prefill ({self.mechanism})" if self.prefill_check \
            else "decides by shape alone (Bug B can fire)"
        where = self.release_read if self.exact else f"{self.release_read} (nearest read)"
        return f"vLLM {where}, {self.runner.upper()} runner: uniform-decode dispatch {how}"


def dispatch_rule(version: str, runner: str, method: str, *,
                  hybrid: bool = True) -> DispatchRule:
    """Does this release's uniform-decode dispatch, on this runner, check for a prefill?

    ``runner`` is ``v1``/``v2``/``auto`` (auto resolved by :func:`default_runner`; pass the
    runner the server's log names when there is one). Upstream only, i.e. without the
    residue-lab plugin: with the plugin ``applied`` the answer is yes on both runners.
    """
    if runner not in RUNNERS:
        raise ValueError(f"unknown runner {runner!r}; known: {', '.join(RUNNERS)}")
    rel, exact = release_facts(version)
    resolved = default_runner(version, method, hybrid=hybrid) if runner == "auto" else runner
    mech = rel.v2_prefill_check if resolved == "v2" else rel.v1_prefill_check
    return DispatchRule(resolved, mech is not None, mech, rel.version, exact)


#: What a batched final prefill chunk (``--load``: a ``1 + k``-token chunk beside ``1 + k``-token
#: decode rows, shape-uniform) did on real vLLM, per release measured
#: (``reports/h200/shapes/``). vLLM 0.26.0's V1 source dispatches such a batch to the FULL
#: verify graph like a lone chunk (``_is_uniform_decode`` is shape-only; 20 tokens pad to a
#: captured 24-token, 6-request FULL key), but the GDN metadata builder refreshes the graph's
#: persistent state buffers only when no row is a prefill, so the replay reads what an
#: earlier all-decode step left: what that does to the answer depends on the server's
#: history (docs/shapes.md). Measured: broken on a fresh server, clean on reset servers, so
#: the rule names those residues to measure (auto confirms them on fresh servers), never
#: predicts them from the lone-request rule.
LOAD_MEASURED: dict[str, str] = {
    "0.26.0": "on the H200, MTP k = 3 at L = 996 ended in a 4-token chunk beside 4 decode "
              "rows (20 tokens, FULL by shape): broken unpatched on a fresh server, clean on "
              "reset servers (unpatched and patched, one cell each): it depends on the "
              "server's history; no ngram cell scheduled that shape",
}


def load_measured(version: str | None) -> str:
    """What real vLLM ``version`` did with a batched ``1 + k``-token final chunk, in words
    (the rule's reason for naming batched residues to measure, not predicting them)."""
    seen = LOAD_MEASURED.get(str(version or "").split("+")[0])
    if seen:
        return f"vLLM {version}: {seen}"
    where = f"vLLM {version}" if version else "this vLLM"
    known = "; ".join(f"{v}: {t}" for v, t in LOAD_MEASURED.items())
    return f"not measured on {where}; measured on {known}"


def runner_env(runner: str) -> dict[str, str]:
    """The environment a server needs for ``--runner`` (``auto``: nothing, vLLM decides)."""
    if runner not in RUNNERS:
        raise ValueError(f"unknown runner {runner!r}; known: {', '.join(RUNNERS)}")
    return {} if runner == "auto" else {RUNNER_ENV: "1" if runner == "v2" else "0"}


__all__ = ["RUNNER_ENV", "RUNNERS", "METHODS", "Release", "RELEASES", "DispatchRule",
           "release_facts", "default_runner", "dispatch_rule", "runner_env", "LOAD_MEASURED",
           "load_measured"]
