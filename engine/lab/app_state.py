"""What every HTTP handler of the lab server shares: the config, the engine, the tokenizer,
and the request checks they all make (API key, JSON body, model name, chat template).

One ``AppState`` is built per app by ``server.build_app``; the handlers in ``server.py``
and ``serving_chat.py`` are plain functions of (state, request).
"""
from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from starlette.requests import Request as HTTPRequest
from starlette.responses import JSONResponse

from .config import LabConfig
from .engine_core import AsyncEngine
from .tokenizer import ChatFormatError, LabTokenizer

__all__ = ["APIError", "AppState", "error_response"]


class APIError(Exception):
    """A request the server refuses: becomes an OpenAI-style JSON error with ``status``."""

    def __init__(self, status: int, message: str, type_: str = "BadRequestError",
                 param: str | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.type, self.param = status, message, type_, param


def error_response(status: int, message: str, type_: str = "BadRequestError",
                   param: str | None = None) -> JSONResponse:
    return JSONResponse({"error": {"message": message, "type": type_, "param": param,
                                   "code": status}}, status_code=status)


@dataclass
class AppState:
    cfg: LabConfig
    engine: AsyncEngine
    tokenizer: LabTokenizer
    started: float = field(default_factory=time.time)

    @property
    def accepted_names(self) -> set[str]:
        return {self.cfg.served_model_name, self.cfg.model, *self.cfg.served_model_aliases}

    def check_auth(self, request: HTTPRequest) -> None:
        key = self.cfg.api_key
        if key and request.headers.get("authorization") != f"Bearer {key}":
            raise APIError(401, "Unauthorized: missing or wrong API key", "AuthenticationError")

    @staticmethod
    async def read_json(request: HTTPRequest) -> dict[str, Any]:
        body = await request.body()
        try:
            data = json.loads(body)
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise APIError(400, f"request body is not valid JSON: {e}") from None
        if not isinstance(data, dict):
            raise APIError(400, "request body must be a JSON object")
        return data

    def check_model(self, data: dict[str, Any]) -> None:
        m = data.get("model")
        if m is not None and m not in self.accepted_names:
            raise APIError(404, f"The model `{m}` does not exist.", "NotFoundError", "model")

    def templated_ids(self, data: dict[str, Any]) -> np.ndarray:
        try:
            text = self.tokenizer.apply_chat_template(
                data.get("messages"),
                add_generation_prompt=bool(data.get("add_generation_prompt", True)))
        except ChatFormatError as e:
            raise APIError(400, str(e), param="messages") from None
        except Exception as e:  # template errors
            raise APIError(400, f"chat template failed: {e}", param="messages") from None
        return self.tokenizer.encode(text)
