"""Request: one chat completion as the engine core tracks it.

Mirrors ``vllm/v1/request.py`` (``Request``: prompt and output token ids,
``num_computed_tokens``, ``spec_token_ids``, ``num_cached_tokens``, block hashes).
"""
from __future__ import annotations

import time

import numpy as np

WAITING, RUNNING, FINISHED = "waiting", "running", "finished"


class Request:
    def __init__(self, request_id: str, prompt_token_ids: np.ndarray, max_tokens: int,
                 stop_token_ids: tuple[int, ...], num_logprobs: int | None = None) -> None:
        self.request_id = request_id
        self.prompt_token_ids = np.asarray(prompt_token_ids, dtype=np.int32)
        self.num_prompt_tokens = len(self.prompt_token_ids)
        self.output_token_ids: list[int] = []
        self.num_logprobs = num_logprobs  # None: not asked for; N: top-N alternatives too
        self.output_logprobs: list[list[tuple[int, float]]] = []  # per output token
        self.max_tokens = max_tokens
        self.stop_token_ids = stop_token_ids
        self.num_computed_tokens = 0
        self.num_cached_tokens = -1     # prefix-cache hit, set on first scheduling
        self.spec_token_ids: list[int] = []
        self.block_ids: list[int] = []
        self.block_table = np.zeros(0, dtype=np.int32)
        self.block_hashes: list[int] = []
        self.num_cached_blocks = 0
        self.state = None               # recurrent state (model.State)
        # prompt_logprobs (vLLM's extra parameter): None, not asked; N: the top N too
        self.num_prompt_logprobs: int | None = None
        self.prompt_logprobs: list | None = None
        self.resumed_at = 0             # the prefix-cache hit it was first scheduled with
        self.resumed_state = None       # and the state it resumed from there (None: derived)
        self.status = WAITING
        self.finish_reason: str | None = None
        self.arrival_time = time.monotonic()
        self._arr: np.ndarray | None = None

    @property
    def num_tokens(self) -> int:
        return self.num_prompt_tokens + len(self.output_token_ids)

    @property
    def prefill_target(self) -> int:
        """Tokens to compute before decoding: the prompt, or after a preemption everything
        but the last sampled token (which is the next decode input)."""
        return self.num_tokens - 1 if self.output_token_ids else self.num_prompt_tokens

    @property
    def is_prefill(self) -> bool:
        return self.num_computed_tokens < self.prefill_target

    def token_array(self) -> np.ndarray:
        """Prompt + output token ids (cached until the output grows)."""
        if self._arr is None or len(self._arr) != self.num_tokens:
            if self.output_token_ids:
                self._arr = np.concatenate(
                    (self.prompt_token_ids, np.asarray(self.output_token_ids, dtype=np.int32)))
            else:
                self._arr = self.prompt_token_ids
        return self._arr

    def last_token(self) -> int:
        return self.output_token_ids[-1] if self.output_token_ids else int(self.prompt_token_ids[-1])
