"""A served program with a grandchild, as vLLM's API server has its engine core: the
child forks a helper by multiprocessing (fork context, like vLLM's default), writes both
pids to a file, and both block until killed."""
from __future__ import annotations

import multiprocessing
import os
import sys


def _helper(r: int) -> None:
    os.read(r, 1)            # blocks until killed: it never gets a byte


def main(argv: list[str]) -> int:
    pid_file = argv[0]
    r, _w = os.pipe()
    helper = multiprocessing.get_context("fork").Process(target=_helper, args=(r,))
    helper.start()
    tmp = pid_file + ".tmp"
    with open(tmp, "w") as f:
        f.write(f"{os.getpid()} {helper.pid} {os.environ.get('TREE_MARK', '')}\n")
    os.replace(tmp, pid_file)
    print("tree entry up", flush=True)
    os.read(r, 1)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
