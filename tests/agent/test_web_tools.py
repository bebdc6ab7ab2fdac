"""The web tools against a local site on 127.0.0.1 speaking real HTTP: readable text out
of a page, the bounds (time, size after decompression, redirects, types), the address
fence (loopback, private, link-local; literal addresses, names, redirects, a resolver
answering as an attacker's DNS would), the search backends' APIs, and per-person limits."""

from __future__ import annotations

import asyncio
import socket
import tracemalloc
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp.abc import AbstractResolver, ResolveResult

from hermes.config import WebConfig
from hermes.fence import fenced
from hermes.tools.addresses import parse_networks, refusal
from hermes.tools.web import WebTools
from tests.fakes.search_engines import FakeSearchEngines
from tests.fakes.web_site import ARTICLE_TEXT, SECRET, WebSite, gzip_bomb

USER = "u_00000000000000a1"


@pytest.fixture
def site() -> Iterator[WebSite]:
    server = WebSite().start()
    yield server
    server.stop()


def tools(**web: Any) -> WebTools:
    settings: dict[str, Any] = {"allow_networks": ["127.0.0.1/32"], **web}
    return WebTools(WebConfig.model_validate(settings), read_pdf=_read_pdf)


async def _read_pdf(data: bytes) -> str:
    from gateway.pipeline.pdf_text import pdf_text

    return await pdf_text(data, max_pages=10, max_chars=10_000, seconds=20)


def fetch(web: WebTools, url: str) -> dict[str, Any]:
    async def go() -> dict[str, Any]:
        try:
            return await web.run_fetch(USER, {"url": url})
        finally:
            await web.close()

    return asyncio.run(go())


def content(result: dict[str, Any]) -> str:
    assert result["success"], result
    inside = fenced(result["content"])
    assert inside is not None, "a page's text is fenced"
    return inside[1]


def test_a_page_gives_its_article_without_menus_and_ads(site: WebSite) -> None:
    result = fetch(tools(), f"{site.root}/article")
    text = content(result)
    assert ARTICLE_TEXT in " ".join(text.split())
    assert "BUY CHEAP WATCHES" not in text and "Subscribe now" not in text
    assert result["title"] == "The night train returns" and not result["truncated"]


def test_text_and_pdf_are_read_and_other_types_refused(site: WebSite) -> None:
    assert content(fetch(tools(), f"{site.root}/notes.txt")) == ARTICLE_TEXT
    assert "Quarterly report: sales up" in content(fetch(tools(), f"{site.root}/report.pdf"))
    image = fetch(tools(), f"{site.root}/photo.png")
    assert not image["success"] and "image/png" in image["error"]
    missing = fetch(tools(), f"{site.root}/nothing-here")
    assert not missing["success"] and "404" in missing["error"]


def test_redirects_are_followed_and_bounded(site: WebSite) -> None:
    assert ARTICLE_TEXT in " ".join(content(fetch(tools(), f"{site.root}/moved")).split())
    assert fetch(tools(), f"{site.root}/chain/4")["success"]  # five redirects
    too_many = fetch(tools(), f"{site.root}/chain/5")
    assert not too_many["success"] and "more than 5 redirects" in too_many["error"]
    loop = fetch(tools(), f"{site.root}/loop")
    assert not loop["success"] and "redirects" in loop["error"]


def test_a_slow_drip_ends_at_the_deadline(site: WebSite) -> None:
    result = fetch(tools(fetch={"timeout": 1.0}), f"{site.root}/drip")
    assert not result["success"] and "did not answer in 1 s" in result["error"]


def test_a_gigabyte_body_is_cut_at_the_bound(site: WebSite) -> None:
    result = fetch(tools(fetch={"max_bytes": 100_000, "max_chars": 5_000}), f"{site.root}/huge")
    assert result["truncated"] and len(content(result)) == 5_000


def test_a_gzip_bomb_never_inflates_past_the_bound(site: WebSite) -> None:
    """200 MB of page in 200 KB of gzip: decompressed as far as max_bytes, no further
    (the peak of Python's allocations stays far under what the bomb holds)."""
    web = tools(fetch={"max_bytes": 1_000_000})
    gzip_bomb()  # made before measuring
    tracemalloc.start()
    try:
        result = fetch(web, f"{site.root}/bomb")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert result["success"] and result["truncated"]
    assert peak < 30_000_000, f"peak {peak:,} bytes"


@pytest.mark.parametrize(
    ("address", "kind"),
    [
        ("127.0.0.1", "loopback"),
        ("127.8.9.10", "loopback"),
        ("::1", "loopback"),
        ("::ffff:127.0.0.1", "loopback"),
        ("10.1.2.3", "private"),
        ("172.20.0.5", "private"),
        ("192.168.1.1", "private"),
        ("fd12::1", "private"),
        ("169.254.169.254", "link-local"),  # cloud metadata
        ("fe80::1", "link-local"),
        ("100.64.0.1", "not public"),  # shared address space (carrier NAT)
        ("0.0.0.0", "unspecified"),
        ("224.0.0.1", "multicast"),
        ("192.0.2.1", "private"),  # documentation: refused even with "private" allowed
    ],
)
def test_addresses_that_are_not_public_are_refused(address: str, kind: str) -> None:
    import ipaddress

    why = refusal(ipaddress.ip_address(address), [])
    assert why is not None and kind in why
    assert refusal(ipaddress.ip_address("93.184.216.34"), []) is None
    allowed = parse_networks(["loopback", "private", "link-local", "100.64.0.0/10"])
    opened = refusal(ipaddress.ip_address(address), allowed) is None
    assert opened == (address not in ("0.0.0.0", "224.0.0.1", "192.0.2.1")), address


def test_no_loopback_by_address_by_name_or_by_redirect_unless_allowed(site: WebSite) -> None:
    closed = tools(allow_networks=[])
    port = site.port
    for url in (
        f"http://127.0.0.1:{port}/secret",
        f"http://localhost:{port}/secret",  # a name that resolves to 127.0.0.1
        f"http://[::ffff:127.0.0.1]:{port}/secret",
        f"http://2130706433:{port}/secret",  # 127.0.0.1 as one number
    ):
        result = fetch(closed, url)
        assert not result["success"], url
        assert "not allowed" in result["error"] or "not a valid" in result["error"], result
    # an allowed site redirecting to a private, a link-local (metadata) or a loopback one
    for target in (
        "http://169.254.169.254/latest/meta-data/",
        "http://10.0.0.1/admin",
        f"http://127.0.0.2:{port}/secret",
    ):
        result = fetch(tools(), f"{site.root}/away?to={target}")
        assert not result["success"] and "not allowed" in result["error"], (target, result)
    assert SECRET not in str([path for path, _ in site.requests])
    assert not any(path == "/secret" for path, _ in site.requests)
    assert fetch(tools(allow_networks=["loopback"]), f"http://localhost:{port}/secret")["success"]


class HostileDNS(AbstractResolver):
    """Answers as an attacker's name server: `evil.test` a refused address only,
    `mixed.test` a refused address first and then an allowed one."""

    def __init__(self, answers: dict[str, list[str]]) -> None:
        self.answers = answers
        self.asked: list[str] = []

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        self.asked.append(host)
        return [
            ResolveResult(
                hostname=host, host=ip, port=port, family=socket.AF_INET, proto=0, flags=0
            )
            for ip in self.answers[host]
        ]

    async def close(self) -> None:
        pass


def test_the_address_checked_is_the_address_connected_to() -> None:
    """A second server holds a secret on 127.0.0.2 (not allowed); a name resolving to it
    first and to the allowed 127.0.0.1 second reaches only 127.0.0.1: the connection
    uses the checked answer, never a resolution of its own."""
    public = WebSite().start()
    private = WebSite(host="127.0.0.2", port=public.port)
    private.serve = lambda handler, path, query: private.send(  # type: ignore[method-assign]
        handler, 200, "text/plain", SECRET.encode()
    )
    private.start()
    try:
        dns = HostileDNS({"mixed.test": ["127.0.0.2", "127.0.0.1"], "evil.test": ["127.0.0.2"]})
        web = WebTools(WebConfig.model_validate({"allow_networks": ["127.0.0.1/32"]}), resolver=dns)

        async def go() -> tuple[dict[str, Any], dict[str, Any]]:
            try:
                mixed = await web.run_fetch(
                    USER, {"url": f"http://mixed.test:{public.port}/notes.txt"}
                )
                evil = await web.run_fetch(
                    USER, {"url": f"http://evil.test:{public.port}/notes.txt"}
                )
                return mixed, evil
            finally:
                await web.close()

        mixed, evil = asyncio.run(go())
        assert content(mixed) == ARTICLE_TEXT
        assert not evil["success"] and "evil.test resolves to a loopback address" in evil["error"]
        assert private.requests == [] and dns.asked == ["mixed.test", "evil.test"]
    finally:
        public.stop()
        private.stop()


def search(web: WebTools, query: str, **args: Any) -> dict[str, Any]:
    async def go() -> dict[str, Any]:
        try:
            return await web.run_search(USER, {"query": query, **args})
        finally:
            await web.close()

    return asyncio.run(go())


@pytest.mark.parametrize("backend", ["searxng", "brave"])
def test_the_search_backends_answer_fenced_results(site: WebSite, backend: str) -> None:
    key = site.brave_key if backend == "brave" else None
    web = WebTools(
        WebConfig.model_validate({"search": {"backend": backend, "url": site.root}}), api_key=key
    )
    result = search(web, "night trains")
    assert result["success"] and result["count"] == 2
    listing = fenced(result["results"])
    assert listing is not None  # "IGNORE YOUR RULES" sits inside the fence
    assert (
        "Night trains in Europe: night trains" in listing[1]
        and f"{site.root}/article" in listing[1]
    )
    assert search(web, "night trains", max_results=1)["count"] == 1
    site.search_status = 429
    refused = search(web, "night trains")
    assert not refused["success"] and "429" in refused["error"]


def test_a_wrong_brave_key_is_an_error_not_results(site: WebSite) -> None:
    web = WebTools(
        WebConfig.model_validate({"search": {"backend": "brave", "url": site.root}}), api_key="no"
    )
    result = search(web, "anything")
    assert not result["success"] and "401" in result["error"]


def test_each_person_is_limited(site: WebSite) -> None:
    web = tools(per_person_per_minute=0.001, per_person_burst=2)

    async def go() -> list[dict[str, Any]]:
        try:
            url = {"url": f"{site.root}/notes.txt"}
            return [
                await web.run_fetch(USER, url),
                await web.run_fetch(USER, url),
                await web.run_fetch(USER, url),
                await web.run_fetch("u_00000000000000b2", url),  # someone else
            ]
        finally:
            await web.close()

    first, second, third, other = asyncio.run(go())
    assert first["success"] and second["success"] and other["success"]
    assert not third["success"] and "a minute" in third["error"]


@pytest.fixture
def engines(tmp_path: Path) -> Iterator[FakeSearchEngines]:
    fake = FakeSearchEngines(tmp_path).start()
    yield fake
    fake.stop()


def ddgs_tools(engines: FakeSearchEngines, **search: Any) -> WebTools:
    settings = {"proxy": engines.proxy, "ca_file": str(engines.ca), "timeout": 5, **search}
    return WebTools(WebConfig.model_validate({"search": settings}))


def test_the_default_backend_finds_through_the_engines_ddgs_reads(
    engines: FakeSearchEngines,
) -> None:
    """ddgs (no key) in its own "auto" mode: the engines it tries first are unreachable,
    DuckDuckGo answers; its results come back fenced."""
    result = search(ddgs_tools(engines), "night trains")
    assert result["success"], result
    listing = fenced(result["results"])
    assert listing is not None and "Night trains in Europe return" in listing[1]
    assert "https://example.org/night-trains" in listing[1]
    assert engines.queries == ["night trains"]


@pytest.mark.parametrize("fault", ["status", "hang"])
def test_engines_that_refuse_or_hang_are_an_error_in_words(
    engines: FakeSearchEngines, fault: str
) -> None:
    if fault == "status":
        engines.status = 503
    else:
        engines.hang = True
    result = search(ddgs_tools(engines, timeout=2), "night trains")
    assert not result["success"]
    assert "search" in result["error"] and "Traceback" not in result["error"]


@pytest.mark.parametrize(
    ("note", "repeats"),
    [
        ("The night train from Vienna to Rome was brought back last spring", "a"),
        ("THE NIGHT TRAIN — from Vienna, to Rome; was brought back!", "a"),  # case, marks
        ("Uma wants to take the night train from Vienna to Rome", None),  # her own words
        ("Prefers sleeper trains to flying", None),
        ("夜行列車はウィーンからローマまで運行を再開しました", "b"),  # a run without spaces
        ("ローマへの夜行列車に乗りたい", None),
    ],
)
def test_a_note_that_repeats_what_the_turn_read_is_found(note: str, repeats: str | None) -> None:
    from hermes.tools.taint import Taint

    taint = Taint()
    assert not taint.tainted and not taint.repeats(ARTICLE_TEXT)
    taint.read("https://example.org/a", ARTICLE_TEXT)
    taint.read(
        "https://example.org/b", "昨年の春、夜行列車はウィーンからローマまで運行を再開しました。"
    )
    where = taint.repeats(note)
    assert taint.tainted and where == (repeats and f"https://example.org/{repeats}")
    assert "https://example.org/a" in taint.context()
