"""What every HTML page the server gives shares: its security headers and its forms."""

from __future__ import annotations

from urllib.parse import parse_qs

from fastapi import HTTPException, Request

__all__ = ["PAGE_HEADERS", "read_form"]

PAGE_HEADERS = {
    "Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; "
    "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}


async def read_form(request: Request) -> dict[str, str]:
    """A urlencoded form's fields (the first of each), at most 4 KiB of it."""
    if request.headers.get("content-type", "").split(";")[0].strip() != (
        "application/x-www-form-urlencoded"
    ):
        raise HTTPException(415, "send the form urlencoded")
    body = await request.body()
    if len(body) > 4096:
        raise HTTPException(413, "form too large")
    try:
        parsed = parse_qs(body.decode("utf-8"), max_num_fields=8, strict_parsing=False)
    except (UnicodeDecodeError, ValueError):
        raise HTTPException(400, "not a form") from None
    return {k: v[0] for k, v in parsed.items()}
