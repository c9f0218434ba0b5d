"""The body of every error answer the HTTP services give."""

from __future__ import annotations

from pydantic import BaseModel

__all__ = ["ErrorBody"]


class ErrorBody(BaseModel):
    """Every error answer."""

    detail: str
