"""Residue sweeps in a pytest suite: a serving build checked the way vLLM's own tests check
one, one parametrised test item per configuration (docs/pytest.md).

    pytest examples/test_residues.py -n 2                  # the CPU lab engine (default)
    pytest examples/test_residues.py -n 2 --residue-out results/   # records and reports kept there
    pytest examples/test_residues.py -n 2 --residue-gpus 0,1 \
        --residue-args "--engine vllm --model /models/tiny-hybrid"   # a vLLM build, a GPU per worker

The matrix is the thread's (MTP k = 3, prefix caching with a 128-token match unit): FULL
verify graphs without the prefill fix (``--patches none``) break a lone request whose
final prefill chunk is ``1 + k`` tokens, residue 4 on a cache hit. That item fails, with
the broken cell in its message; the others pass. On the lab ``--patches`` switches the
lab's own fix; on vLLM it selects residue-lab's patch plugin (``none``: the build as it is).
"""
import pytest

from harness.pytest_plugin import configurations

# The rule's neighbourhood (k + 1 = 4) and the ends: a quick check, not a full sweep.
# A pre-merge gate sweeps them all: "--residues", "all".
RESIDUES = ("--residues", "2-6")


@pytest.mark.parametrize("flags", configurations(
    "--cudagraph FULL_AND_PIECEWISE,PIECEWISE --patches none,all"))
def test_mtp_cache_hit(residue_sweep, flags):
    residue_sweep("--spec", "mtp", "--ctx", "huge", *flags, *RESIDUES)


@pytest.mark.residue_sweep("--spec", "ngram", "--ctx", "huge", "--cudagraph", "PIECEWISE",
                           "--patches", "none", *RESIDUES)
def test_ngram_piecewise_is_clean():
    """PIECEWISE captures no FULL verify graph: nothing to replay over a prefill tail."""
