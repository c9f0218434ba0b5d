"""One lean kept-alive HTTP/1.1 connection for the async node client's long polls.

A simulated agent spends its life in long polls; httpx costs about half a
millisecond of CPU per answer, which for ten thousand agents in one process is
seconds. :class:`LeanConnection` reads the broker's Content-Length-framed answers
directly from asyncio streams.
"""

from __future__ import annotations

import asyncio
import ssl
from urllib.parse import urlsplit

__all__ = ["LeanConnection", "LeanUnavailable"]


class LeanUnavailable(Exception):
    """No answer from the broker (the client turns it into ``BrokerUnavailable``)."""


class LeanConnection:
    """One kept-alive HTTP/1.1 connection for ``GET`` requests, on bare asyncio streams.

    A simulated agent spends its life in long polls; httpx costs about half a
    millisecond of CPU per answer, which for ten thousand agents in one process is
    seconds. This reads the broker's Content-Length-framed answers directly.
    """

    def __init__(self, base_url: str, verify: ssl.SSLContext | bool) -> None:
        parts = urlsplit(base_url)
        tls = parts.scheme == "https"
        self.host = parts.hostname or "localhost"
        self.port = parts.port or (443 if tls else 80)
        self.netloc = parts.netloc.encode()
        self.prefix = parts.path
        self.base_url = base_url
        self.tls: ssl.SSLContext | None = None
        if tls:
            self.tls = (
                verify if isinstance(verify, ssl.SSLContext) else ssl.create_default_context()
            )
        self._streams: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None

    def close(self) -> None:
        if self._streams is not None:
            self._streams[1].close()
            self._streams = None

    async def get(self, target: str, authorization: str, timeout: float) -> tuple[int, bytes]:
        """``(status, body)``; a stale kept-alive connection is replaced once."""
        request = b"GET %s HTTP/1.1\r\nHost: %s\r\nAuthorization: %s\r\n\r\n" % (
            (self.prefix + target).encode(),
            self.netloc,
            authorization.encode(),
        )
        for attempt in (1, 2):
            fresh = self._streams is None
            try:
                async with asyncio.timeout(timeout):
                    if self._streams is None:
                        self._streams = await asyncio.open_connection(
                            self.host, self.port, ssl=self.tls
                        )
                    reader, writer = self._streams
                    writer.write(request)
                    return await self._response(reader)
            except (
                OSError,
                EOFError,
                TimeoutError,
                ValueError,
                asyncio.IncompleteReadError,
            ) as exc:
                self.close()
                if fresh or attempt == 2:
                    reason = str(exc) or type(exc).__name__
                    raise LeanUnavailable(
                        f"no answer from the broker at {self.base_url}: {reason}"
                    ) from None
        raise AssertionError("unreachable")

    async def _response(self, reader: asyncio.StreamReader) -> tuple[int, bytes]:
        head = await reader.readuntil(b"\r\n\r\n")
        lines = head.split(b"\r\n")
        status = int(lines[0].split(b" ", 2)[1])
        length: int | None = None
        close = False
        for line in lines[1:]:
            name, _, value = line.partition(b":")
            name = name.strip().lower()
            if name == b"content-length":
                length = int(value)
            elif name == b"connection" and value.strip().lower() == b"close":
                close = True
            elif name == b"transfer-encoding":
                raise ValueError("the broker answered with a framing this client does not read")
        if length is None:
            raise ValueError("the broker's answer has no Content-Length")
        body = await reader.readexactly(length)
        if close:
            self.close()
        return status, body
