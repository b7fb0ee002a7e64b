"""http1: HTTP/1.1 framing (pure), the keep-alive pool against misbehaving servers, and the direct
transport's mapping of what servers send onto ProtocolErrors."""

from __future__ import annotations

import asyncio
import contextlib
import json

import pytest

from twinkle_agentic.protocol import OpenAI, RetryPolicy
from twinkle_agentic.protocol.direct_transport import DirectChatTransport
from twinkle_agentic.protocol.errors import (
    ProtocolConnectionError,
    ProtocolTimeoutError,
    RateLimitedError,
    ServerError,
)
from twinkle_agentic.protocol.http1 import ConnectionPool, HTTPParseError, MessageReader, Origin

COMPLETION = {"choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}]}


def parse_all(raw: bytes, response: bool = True, step: int = 7) -> list:
    reader = MessageReader(response=response)
    out = []
    for i in range(0, len(raw), step):  # fed in small pieces: no message may depend on one read
        reader.feed(raw[i:i + step])
        while (message := reader.next()) is not None:
            out.append(message)
    return out


def test_content_length_chunked_and_keep_alive_rules():
    raw = (b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nX-A: 1\r\nx-a: 2\r\n\r\nhello"
           b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3;ext=1\r\nabc\r\n2\r\nde\r\n0\r\nTrailer: t\r\n\r\n"
           b"HTTP/1.1 204 No Content\r\n\r\n"
           b"HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n"
           b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok")
    first, chunked, empty, old, closing = parse_all(raw)
    assert (first.status, first.body, first.headers["x-a"], first.keep_alive) == (200, b"hello", "1, 2", True)
    assert chunked.body == b"abcde" and chunked.keep_alive
    assert empty.status == 204 and empty.body == b""
    assert not old.keep_alive and not closing.keep_alive and closing.body == b"ok"


def test_read_until_close_and_requests():
    reader = MessageReader(response=True)
    reader.feed(b"HTTP/1.1 200 OK\r\n\r\npart one, ")
    assert reader.next() is None
    reader.feed(b"part two")
    message = reader.close()
    assert message.body == b"part one, part two" and not message.keep_alive
    post, get = parse_all(b"POST /v1/x?q=1 HTTP/1.1\r\nHost: h\r\nContent-Length: 2\r\n\r\n{}"
                          b"GET /health HTTP/1.1\r\nHost: h\r\n\r\n", response=False)
    assert post.start[:2] == ["POST", "/v1/x?q=1"] and post.body == b"{}" and get.body == b""


@pytest.mark.parametrize("raw", [b"HTTP/1.1 200 OK\r\nno colon here\r\n\r\n",
                                 b"HTTP/1.1 abc OK\r\n\r\n",
                                 b"SPDY/3 200 OK\r\n\r\n",
                                 b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n",
                                 b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n"])
def test_malformed_framing_is_an_error(raw):
    with pytest.raises(HTTPParseError):
        parse_all(raw, step=len(raw))


class FakeServer:
    """A raw TCP server whose answers are scripted per request (bytes, or a callable of the writer)."""

    def __init__(self, answers):
        self.answers = list(answers)
        self.requests: list[bytes] = []
        self.connections = 0

    async def handle(self, reader, writer):
        self.connections += 1
        while True:
            head = await reader.readuntil(b"\r\n\r\n") if not reader.at_eof() else b""
            if not head:
                break
            length = int(next(line.split(b":")[1] for line in head.split(b"\r\n")
                              if line.lower().startswith(b"content-length")))
            self.requests.append(head + await reader.readexactly(length))
            answer = self.answers.pop(0)
            if answer == "close":
                writer.close()
                return
            if answer == "hang":
                await asyncio.sleep(5)
                return
            writer.write(answer)
            await writer.drain()
            if b"Connection: close" in answer:
                writer.close()
                return

    async def __aenter__(self):
        self.server = await asyncio.start_server(self._safe, "127.0.0.1", 0)
        self.url = f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}/v1"
        return self

    async def _safe(self, reader, writer):
        with contextlib.suppress(asyncio.IncompleteReadError, ConnectionError):
            await self.handle(reader, writer)

    async def __aexit__(self, *exc):
        self.server.close()


def ok(payload=COMPLETION, extra=b""):
    body = json.dumps(payload).encode()
    return b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n%s\r\n%s" % (len(body), extra, body)


def test_pool_reuses_connections_and_resends_once_on_a_stale_one():
    async def scenario():
        # request 2 finds its idle connection closed by the server (no byte of an answer): sent again
        async with FakeServer([ok(), "close", ok(), ok(extra=b"Connection: close\r\n"), ok()]) as server:
            pool = ConnectionPool(Origin(server.url))
            head = b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n"
            statuses = [(await pool.request(head, b"{}", 5.0)).status for _ in range(4)]
            pool.close()
            return statuses, server.connections, len(server.requests)

    statuses, connections, requests = asyncio.run(scenario())
    assert statuses == [200, 200, 200, 200]
    assert requests == 5 and connections == 3  # stale resend opened the 2nd; Connection: close the 3rd


def test_pool_deadlines_of_concurrent_requests_fire_in_their_own_time():
    """One sweep timer serves every request in flight: a short deadline sent after a long one still
    fires on time, a timed-out request leaves the others alone, and the pool goes on serving."""
    head = b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n"

    async def scenario():
        async with FakeServer(["hang", "hang", ok(), ok()]) as server:
            pool = ConnectionPool(Origin(server.url))
            loop = asyncio.get_running_loop()

            async def timed(timeout_s):
                started = loop.time()
                try:
                    return (await pool.request(head, b"{}", timeout_s)).status, loop.time() - started
                except TimeoutError:
                    return "timeout", loop.time() - started

            async def sent(count):
                while len(server.requests) < count:
                    await asyncio.sleep(0.005)

            long = asyncio.create_task(timed(1.0))
            await sent(1)
            short = asyncio.create_task(timed(0.2))
            await sent(2)
            fast = await timed(5.0)
            results = [fast, await short, await long, await timed(5.0)]
            in_flight = len(pool._in_flight)
            pool.close()
            return results, in_flight

    (fast, short, long, after), in_flight = asyncio.run(scenario())
    assert fast[0] == 200 and after[0] == 200
    assert short[0] == "timeout" and 0.19 <= short[1] < 0.6
    assert long[0] == "timeout" and 0.99 <= long[1] < 1.5
    assert in_flight == 0


def transport_call(server_answers, body=None, **client_kwargs):
    async def scenario():
        async with FakeServer(server_answers) as server:
            transport = DirectChatTransport("sk-test", server.url, client_kwargs)
            try:
                return await transport.create(body or {"model": "m", "messages": []}, 1), server.requests
            finally:
                await transport.close()

    return asyncio.run(scenario())


def test_direct_transport_sends_sdk_options_and_reads_chunked_answers():
    body = json.dumps(COMPLETION).encode()
    chunked = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n0\r\n\r\n" % (len(body), body)
    completion, requests = transport_call(
        [chunked], {"model": "m", "messages": [], "extra_body": {"top_k": 3}, "extra_headers": {"X-Trace": "7"},
                    "extra_query": {"api-version": "2024"}, "timeout": 5},
        default_headers={"X-Team": "rl"})
    assert completion == COMPLETION
    head, _, sent = requests[0].partition(b"\r\n\r\n")
    assert head.startswith(b"POST /v1/chat/completions?api-version=2024 HTTP/1.1")
    assert b"Authorization: Bearer sk-test" in head and b"X-Trace: 7" in head and b"X-Team: rl" in head
    assert json.loads(sent) == {"model": "m", "messages": [], "top_k": 3}


def test_direct_transport_errors():
    error = b'{"error": {"message": "slow down!!!"}}'
    limited = b"HTTP/1.1 429 Too Many Requests\r\nretry-after-ms: 250\r\nContent-Length: %d\r\n\r\n%s" % (
        len(error), error)
    with pytest.raises(RateLimitedError) as caught:
        transport_call([limited])
    assert caught.value.retry_after_s == 0.25 and caught.value.message == "slow down!!!"
    with pytest.raises(ServerError, match="upstream exploded"):
        transport_call([b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 17\r\n\r\nupstream exploded"])
    with pytest.raises(ProtocolConnectionError, match="ConnectionClosed"):
        transport_call(["close"])
    with pytest.raises(ProtocolConnectionError, match="HTTPParseError"):
        transport_call([b"HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\n"])
    with pytest.raises(ProtocolTimeoutError):
        transport_call(["hang"], timeout=0.2)


def test_openai_direct_retries_5xx_then_succeeds():
    async def scenario():
        async with FakeServer([b"HTTP/1.1 503 Busy\r\nContent-Length: 4\r\n\r\nbusy", "close", ok()]) as server:
            api = OpenAI("m", base_url=server.url, async_transport="direct",
                         retry=RetryPolicy(attempts=3, base_s=0.01, max_s=0.02))
            async with api.session():
                return await api.acall({"messages": [{"role": "user", "content": "q"}]}), len(server.requests)

    reply, requests = asyncio.run(scenario())
    assert reply == {"role": "assistant", "content": "hi", "finish_reason": "stop"} and requests == 3
