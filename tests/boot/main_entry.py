"""Run as ``-m tests.boot.main_entry OUT``: records what `python -m` semantics give it."""
import json
import os
import sys

if __name__ == "__main__":
    with open(sys.argv[1], "w") as f:
        json.dump({"argv": sys.argv, "name": __name__,
                   "preloaded_copy": "tests.boot.main_entry" in sys.modules,
                   "sys_path_has": os.environ.get("EXTRA_DIR", "") in sys.path,
                   "mark": os.environ.get("MAIN_MARK")}, f)
    sys.exit(3)
