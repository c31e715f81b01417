"""``python -m engine.lab --port P [flags]``: start the lab engine."""
import os

# One BLAS thread: the lab never multiplies matrices, and OpenBLAS's thread pool start-up
# is a measurable part of boot on a busy box.
for _v in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_v, "1")

from .cli import main  # noqa: E402

main()
