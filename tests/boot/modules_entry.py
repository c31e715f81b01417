"""Entry ``tests.boot.modules_entry:main`` (argv: OUT): a forked child writes which
``tests.boot`` modules it inherited and whether its (fake) CUDA is initialised."""
import json
import sys


def main(argv):
    from tests.boot.fake_torch_lazy import STATE

    with open(argv[0], "w") as f:
        json.dump({"modules": sorted(m for m in sys.modules if m.startswith("tests.boot.")),
                   "cuda": STATE["initialised"]}, f)
    return 0
