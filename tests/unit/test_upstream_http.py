"""server/upstream/http.py: the per-message cap on upstream HTTP bodies, compressed or not."""

from __future__ import annotations

import asyncio
import gzip
import zlib

import httpx2
import pytest

from omp_a2a_bridge.server.upstream.http import CappedTransport, MessageTooLarge, cap_text

LIMIT = 1 << 20


def fetch(body: bytes, headers: dict[str, str]) -> bytes:
    """GET through the capped transport, the server side a canned reply."""

    def reply(request: httpx2.Request) -> httpx2.Response:
        return httpx2.Response(200, headers=headers, content=body)

    async def run() -> bytes:
        transport = CappedTransport(LIMIT, inner=httpx2.MockTransport(reply))
        async with httpx2.AsyncClient(transport=transport) as client:
            return (await client.get("http://upstream.test/mcp")).content

    return asyncio.run(run())


def test_a_body_at_the_cap_passes_and_one_byte_more_does_not():
    assert len(fetch(b"x" * LIMIT, {"content-type": "application/json"})) == LIMIT
    with pytest.raises(MessageTooLarge, match="over 1 MiB"):
        fetch(b"x" * (LIMIT + 1), {"content-type": "application/json"})


@pytest.mark.parametrize(
    "encoding, pack",
    [
        ("gzip", gzip.compress),
        ("deflate", zlib.compress),
        ("deflate", lambda b: zlib.compress(b, wbits=-15)),  # raw deflate, as some servers send
    ],
)
def test_a_compressed_body_is_capped_by_its_decoded_size(encoding, pack):
    small = b'{"ok": true}' * 1000
    headers = {"content-type": "application/json", "content-encoding": encoding}
    assert fetch(pack(small), headers) == small
    bomb = pack(b"\0" * (64 * LIMIT))  # 64 MiB of zeros in ~64 KiB
    assert len(bomb) < LIMIT // 8
    with pytest.raises(MessageTooLarge):
        fetch(bomb, headers)


def test_an_event_stream_is_left_to_the_sse_reader():
    body = b"data: " + b"x" * (2 * LIMIT) + b"\n\n"
    assert len(fetch(body, {"content-type": "text/event-stream"})) == len(body)


def test_cap_text():
    assert cap_text(32 << 20) == "32 MiB"
    assert cap_text(1000) == "1000 bytes"
