"""vLLM-shaped log lines on stderr: ``INFO 11-30 00:40:01 [api_server.py:1885] message``."""
from __future__ import annotations

import sys
import time


def log(level: str, where: str, msg: str) -> None:
    ts = time.strftime("%m-%d %H:%M:%S")
    sys.stderr.write(f"{level} {ts} [{where}] {msg}\n")
