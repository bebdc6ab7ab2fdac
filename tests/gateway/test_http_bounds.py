"""The HTTP server bounds every connection: how many are open at once, and how long a
request may take to arrive (a client trickling headers or a body is cut off); a flood
is logged once, not once a connection."""

from __future__ import annotations

import asyncio
import logging

import aiohttp
import pytest
from aiohttp import web

from gateway.edge.http_server import HttpServer, Route


async def serving(limit: int = 512, timeout: float = 1.0) -> HttpServer:
    http = HttpServer(
        "127.0.0.1", 0, lambda: {"x": "connected"}, max_connections=limit, read_timeout=timeout
    )

    async def hook(request: web.Request) -> web.Response:  # a webhook reads its body
        return web.Response(text=str(len(await request.read())))

    http.add(Route("POST", "/hook", hook))
    await http.start()
    return http


async def closed_by_server(reader: asyncio.StreamReader) -> bool:
    """Whether the server closes the connection (EOF or reset) while we wait for it."""
    try:
        return await asyncio.wait_for(reader.read(), 30) == b""
    except ConnectionResetError:
        return True


@pytest.mark.parametrize(
    "head",
    [
        b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: ",  # headers never finished
        b"POST /hook HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\nabc",  # a body
    ],
    ids=["headers", "body"],
)
def test_a_client_trickling_its_request_is_cut_off(head: bytes) -> None:
    async def go() -> bool:
        http = await serving(timeout=0.5)
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", http.port)
            writer.write(head)
            await writer.drain()

            async def trickle() -> None:
                for _ in range(600):  # a byte every 0.1 s: never idle, never done
                    writer.write(b"a")
                    await writer.drain()
                    await asyncio.sleep(0.1)

            dripping = asyncio.create_task(trickle())
            try:
                return await closed_by_server(reader)
            finally:
                dripping.cancel()
                writer.close()
        finally:
            await http.stop()

    assert asyncio.run(go())


def test_past_the_connection_limit_new_ones_are_closed_and_logged_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def go() -> tuple[list[bool], int]:
        http = await serving(limit=10, timeout=5.0)
        try:
            held = [await asyncio.open_connection("127.0.0.1", http.port) for _ in range(10)]
            await asyncio.sleep(0)  # every one of them accepted before the next
            extra = [await asyncio.open_connection("127.0.0.1", http.port) for _ in range(30)]
            refused = [await closed_by_server(reader) for reader, _ in extra]
            for _, writer in held + extra:
                writer.close()
            await asyncio.gather(*(w.wait_closed() for _, w in held), return_exceptions=True)
            url = f"http://127.0.0.1:{http.port}/healthz"  # room again: a request is served
            async with aiohttp.ClientSession() as client, client.get(url) as response:
                return refused, response.status
        finally:
            await http.stop()

    with caplog.at_level(logging.WARNING, logger="gateway.edge.http_server"):
        refused, status = asyncio.run(go())
    assert all(refused) and status == 200
    assert sum("over 10 connections" in r.getMessage() for r in caplog.records) == 1


def test_a_keep_alive_client_sending_requests_in_time_is_served() -> None:
    async def go() -> list[int]:
        http = await serving(timeout=1.0)
        try:
            async with aiohttp.ClientSession() as client:
                statuses = []
                for _ in range(5):  # one connection, reused
                    async with client.get(f"http://127.0.0.1:{http.port}/healthz") as r:
                        statuses.append(r.status)
                return statuses
        finally:
            await http.stop()

    assert asyncio.run(go()) == [200] * 5
