"""server/upstream/stdio.py: the stdout line splitter (linear, capped) and the routing of
responses to requests written past the SDK session."""

from __future__ import annotations

import asyncio
import collections
import json

import pytest

from omp_a2a_bridge.server.upstream.config import McpServerSpec
from omp_a2a_bridge.server.upstream.stdio import (
    LineSplitter,
    LineTooLong,
    StdioTransport,
    Waiters,
    _line,
)


def test_lines_split_across_and_within_chunks():
    s = LineSplitter(100)
    assert s.feed(b'{"a":') == []
    assert s.feed(b'1}\n{"b":2}\n{"c"') == [b'{"a":1}', b'{"b":2}']
    assert s.feed(b":3}\n") == [b'{"c":3}']
    assert s.feed(b"\n\n") == [b"", b""]


@pytest.mark.parametrize(
    "chunks", [[b"x" * 101], [b"x" * 60, b"x" * 41], [b"x" * 60, b"x" * 41 + b"\n"]]
)
def test_a_line_over_the_limit_raises_before_its_newline_or_at_it(chunks):
    s = LineSplitter(100)
    with pytest.raises(LineTooLong):
        for c in chunks:
            s.feed(c)


def test_a_line_at_the_limit_passes():
    s = LineSplitter(100)
    assert s.feed(b"x" * 60) == []
    assert s.feed(b"x" * 40 + b"\nrest") == [b"x" * 100]


def test_a_32_mib_message_in_64_kib_chunks_is_one_join():
    """Linear: the old append-and-resplit spent seconds here (not timed; counts the work)."""
    s = LineSplitter(32 << 20)
    chunk = b"x" * 65536
    for _ in range(480):
        assert s.feed(chunk) == []
    [line] = s.feed(b"\n")
    assert len(line) == 480 * 65536


def _transport() -> StdioTransport:
    spec = McpServerSpec(name="t", key="t", command="true")
    return StdioTransport(spec, {}, collections.deque())


def test_only_answers_to_our_requests_are_taken_from_the_sdk():
    async def scenario() -> None:
        w = Waiters()
        rid, fut = w.new()
        theirs = [
            b'{"jsonrpc":"2.0","id":1,"result":{}}',  # the SDK's own (integer) ids
            b'{"jsonrpc":"2.0","method":"notifications/message","params":{"x":"omp-1"}}',
            b'{"jsonrpc":"2.0","id":"omp-1","method":"roots/list"}',  # a request, not an answer
            b'{"jsonrpc":"2.0","id":"omp-9","result":{}}',  # nobody waits for it (timed out)
            b'not json "omp-1',
        ]
        assert rid == "omp-1"
        assert not any(w.answer(line) for line in theirs)
        assert not fut.done()
        assert w.answer(b'{"jsonrpc":"2.0","id":"omp-1","result":{"content":[]}}')
        assert fut.result() == {"jsonrpc": "2.0", "id": "omp-1", "result": {"content": []}}
        assert w.pending == {}
        rid, fut = w.new()
        w.fail_all(ConnectionError("gone"))  # the server's output ended
        assert rid == "omp-2" and isinstance(fut.exception(), ConnectionError)

    asyncio.run(scenario())


def test_a_request_line_is_one_line_of_valid_json_whatever_the_arguments():
    args = {"text": "a\nb \ud800 é"}  # a newline and a lone surrogate an agent may send
    line = _line({"jsonrpc": "2.0", "id": "omp-1", "params": args})
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    assert json.loads(line)["params"] == args


def test_a_request_to_a_server_not_running_is_a_connection_error():
    with pytest.raises(ConnectionError):
        asyncio.run(_transport().request("tools/call", {}, 1.0))


def test_a_line_goes_through_anyio_when_no_asyncio_stream_is_under_its_stdin():
    """``send_line`` writes straight to the asyncio stream under anyio's wrapper; without one it
    falls back to the stdin object's own ``send`` (here a memory stream), whole lines."""
    import anyio

    async def go() -> bytes:
        send, recv = anyio.create_memory_object_stream[bytes](1)
        t = _transport()
        assert t.writer is None
        await t.send_line(send, _line({"id": "omp-1"}))
        return recv.receive_nowait()

    assert asyncio.run(go()) == b'{"id":"omp-1"}\n'


def test_a_line_to_a_closed_stdin_is_a_connection_error_not_a_silent_drop():
    """A closing asyncio transport drops writes silently; ``send_line`` says so instead."""
    import os

    async def go() -> None:
        r, w = os.pipe()
        loop = asyncio.get_running_loop()
        transport, protocol = await loop.connect_write_pipe(
            asyncio.streams.FlowControlMixin, os.fdopen(w, "wb")
        )
        t = _transport()
        t.writer = asyncio.StreamWriter(transport, protocol, None, loop)
        await t.send_line(None, b"one\n")
        assert os.read(r, 10) == b"one\n"
        transport.close()
        try:
            with pytest.raises(ConnectionError):
                await t.send_line(None, b"two\n")
        finally:
            os.close(r)

    asyncio.run(go())
