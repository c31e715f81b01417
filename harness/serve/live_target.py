"""``--url``'s target as the options take it (``SweepOptions.running.live``): the URL and the
key read, the request budget, the run's document nonce drawn; nothing is sent here (the
session connects: ``run/live.connect`` fills in what the server reports)."""
from __future__ import annotations

import argparse
import os
import random
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import httpx

from engine.presets import ServingConfig

from ..errors import UsageError
from .facts import ServerFacts
from .slots import Slot

__all__ = ["API_KEY_ENVS", "DEFAULT_MAX_REQUESTS", "LiveTarget", "RequestBudget",
           "api_key_from_env", "check_url", "live_target"]

# The bearer token for the server: --api-key, else the first of these that is set.
API_KEY_ENVS = ("RESIDUE_LAB_API_KEY", "OPENAI_API_KEY")
DEFAULT_MAX_REQUESTS = 2000


def live_target(ns: argparse.Namespace, written: dict[str, Any]) -> LiveTarget:
    """``--url``, as the options take it: the server flags it refuses (``written``: those
    the command line wrote; the flags it cannot take with it are ``settings/flag_checks``
    rules), the URL and the key read, the run's document nonce drawn; nothing is sent (the
    session connects: ``connect``)."""
    # the server flags it cannot honour are refused by settings/flag_checks.RULES
    key, source = api_key_from_env(ns.api_key)
    return LiveTarget(check_url(ns.url), key, source, ns.concurrency or 1,
                      RequestBudget(ns.max_requests or DEFAULT_MAX_REQUESTS),
                      nonce=(ns.seed[0] if "--seed" in written
                             else random.SystemRandom().randrange(1 << 31)))


def check_url(url: str) -> str:
    """The server's base URL (``http(s)://host[:port]``, a trailing ``/v1`` dropped)."""
    parts = urlsplit(url.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise UsageError(f"--url: {url!r} is not valid; give http://HOST:PORT (the server's "
                         "base URL, as in http://127.0.0.1:8000)")
    path = parts.path.rstrip("/")
    path = path[:-3] if path.endswith("/v1") else path
    return f"{parts.scheme}://{parts.netloc}{path}"


def api_key_from_env(given: str | None) -> tuple[str | None, str | None]:
    """(key, where it came from): --api-key, else RESIDUE_LAB_API_KEY, else OPENAI_API_KEY."""
    if given:
        return given, "--api-key"
    for name in API_KEY_ENVS:
        if os.environ.get(name):
            return os.environ[name], name
    return None, None


class RequestBudget:
    """Counts every HTTP request sent to the live server (an httpx event hook on each
    client the sweep uses) and hands out reservations against ``limit``."""

    def __init__(self, limit: int):
        self.limit = limit
        self.sent = 0
        self.reserved = 0

    def count(self, request: httpx.Request) -> None:
        self.sent += 1

    async def acount(self, request: httpx.Request) -> None:
        self.sent += 1

    def reserve(self, n: int) -> bool:
        """Room for ``n`` more requests after everything sent or reserved so far."""
        if max(self.sent, self.reserved) + n > self.limit:
            return False
        self.reserved = max(self.sent, self.reserved) + n
        return True

    def describe(self) -> dict[str, int]:
        return {"sent": self.sent, "budget": self.limit}


@dataclass(frozen=True)
class LiveTarget:
    """The running server a ``--url`` sweep attaches to, and what it said it is."""

    url: str
    api_key: str | None = field(repr=False)
    key_source: str | None
    concurrency: int
    budget: RequestBudget = field(compare=False)
    report: dict = field(default_factory=dict, compare=False)
    nonce: int = 0                 # the run's document seed base (random unless --seed)
    cfg: ServingConfig | None = field(default=None, compare=False)   # run/live.LiveConfig
    facts: ServerFacts | None = field(default=None, compare=False)   # connect fills it

    @property
    def slots(self) -> tuple[Slot, ...]:
        """One slot per data point in flight (no server behind any of them)."""
        return tuple(Slot(f"live{i}") for i in range(self.concurrency))

    def http_client(self, timeout: float) -> httpx.Client:
        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        return httpx.Client(base_url=self.url, headers=headers, trust_env=False,
                            timeout=httpx.Timeout(timeout, connect=5.0),
                            event_hooks={"request": [self.budget.count]})

    def async_http(self) -> httpx.AsyncClient:
        return httpx.AsyncClient(timeout=httpx.Timeout(120.0, connect=5.0), trust_env=False,
                                 event_hooks={"request": [self.budget.acount]})
