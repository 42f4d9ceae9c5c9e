"""The HTTP client for Streamable-HTTP upstream servers, with stdio's per-message size cap.

The SDK reads a JSON reply whole (``response.aread()``) and caps only SSE events, so a broken or
hostile upstream could make the bridge hold any amount of memory for one answer. Here every
message is capped at the same ``MESSAGE_MAX_BYTES`` as a stdio line: SSE events through the
SDK's own limit, every other body by a transport that counts the bytes as they arrive (after
gzip/deflate, which httpx undoes later) and stops reading at the cap. The SDK turns that error
into a failed call; the connection and the other calls go on.
"""

from __future__ import annotations

import zlib
from collections.abc import AsyncIterator, Mapping

import httpx2

MESSAGE_MAX_BYTES = 32 * 1024 * 1024  # the stdio line cap (upstream_stdio.LINE_MAX_BYTES)


def cap_text(limit: int) -> str:
    """'32 MiB' — how the cap reads in an error (whole MiB, else bytes)."""
    return f"{limit >> 20} MiB" if limit % (1 << 20) == 0 else f"{limit} bytes"


class MessageTooLarge(httpx2.StreamError):
    """An upstream reply went over the cap; the SDK reports a StreamError as a failed call."""


class _CappedBody(httpx2.AsyncByteStream):
    """A response body that raises once more than ``limit`` decoded bytes have arrived."""

    def __init__(self, inner: httpx2.AsyncByteStream, encoding: str, limit: int) -> None:
        self._inner = inner
        self._limit = limit
        # wbits 47: zlib or gzip, as httpx's decoders accept; deflate may also be raw (-15).
        self._inflate = zlib.decompressobj(47) if encoding in ("gzip", "deflate") else None
        self._raw_deflate = encoding == "deflate"
        self._seen = 0

    def _decoded_size(self, chunk: bytes) -> int:
        if self._inflate is None:
            return len(chunk)
        try:
            # Bounded: never inflate more than the room left (+1 to see the overflow).
            out = self._inflate.decompress(chunk, self._limit - self._seen + 1)
        except zlib.error:
            if not self._raw_deflate:
                raise
            self._inflate, self._raw_deflate = zlib.decompressobj(-15), False
            out = self._inflate.decompress(chunk, self._limit - self._seen + 1)
        return len(out) + (self._limit + 1 if self._inflate.unconsumed_tail else 0)

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for chunk in self._inner:
            self._seen += self._decoded_size(chunk)
            if self._seen > self._limit:
                raise MessageTooLarge(f"the upstream's answer is over {cap_text(self._limit)}")
            yield chunk

    async def aclose(self) -> None:
        await self._inner.aclose()


class CappedTransport(httpx2.AsyncBaseTransport):
    """Caps every non-SSE response body; SSE streams are capped per event by the SDK."""

    def __init__(self, limit: int, inner: httpx2.AsyncBaseTransport | None = None) -> None:
        self._inner = inner or httpx2.AsyncHTTPTransport()
        self._limit = limit

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        response = await self._inner.handle_async_request(request)
        if response.headers.get("content-type", "").lower().startswith("text/event-stream"):
            return response
        stream = response.stream
        assert isinstance(stream, httpx2.AsyncByteStream)
        encoding = response.headers.get("content-encoding", "identity").strip().lower()
        capped = _CappedBody(stream, encoding, self._limit)
        return httpx2.Response(
            response.status_code,
            headers=response.headers,
            stream=capped,
            extensions=response.extensions,
        )

    async def aclose(self) -> None:
        await self._inner.aclose()


def http_client(headers: Mapping[str, str], timeout_s: float) -> httpx2.AsyncClient:
    """The client one upstream connection uses: its headers, its timeouts, the size cap."""
    return httpx2.AsyncClient(
        headers=dict(headers),
        timeout=httpx2.Timeout(10.0, read=max(300.0, timeout_s + 30)),
        transport=CappedTransport(MESSAGE_MAX_BYTES),
    )
