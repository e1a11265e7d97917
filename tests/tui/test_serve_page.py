"""The page `racer-tui serve` gives a browser, fetched over loopback: a title,
an icon, every resource from this server (nothing from another site, so it
works offline), and an IPv6 address a browser can open."""

from __future__ import annotations

import asyncio
import io
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import aiohttp
import pytest
from aiohttp.test_utils import TestClient, TestServer
from PIL import Image

from racer_tui.host_names import split_host
from racer_tui.serve_page import PageServer, favicon_ico, url_host

ROOT = Path(__file__).resolve().parents[2]


def _links(page: str) -> list[str]:
    """Every address the page makes the browser fetch or connect to."""
    attributes = re.findall(r"""\b(?:src|href)\s*=\s*["']([^"']+)["']""", page)
    css = re.findall(r"""url\(\s*["']?([^"')]+)""", page)
    return attributes + css


async def test_the_page_has_a_title_an_icon_and_fetches_nothing_from_outside() -> None:
    server = PageServer("true", "127.0.0.1", 0)
    async with TestServer(await server._make_app(), host="127.0.0.1") as site, TestClient(site) as client:
        response = await client.get("/")
        assert response.status == 200
        page = await response.text()
        assert re.search(r"<title>\s*racer-tui\s*</title>", page)
        links = _links(page)
        assert "/favicon.ico" in links and any(link.endswith(".ttf") for link in links)
        # every fetch is this server's (root-relative): no font service, no CDN
        assert [link for link in links if not link.startswith("/") or link.startswith("//")] == []
        for link in links:
            fetched = await client.get(link)
            assert fetched.status == 200, link
        # the websocket goes to the address the page came from, whatever the host was
        assert 'location.host + "/ws"' in page
        icon = await client.get("/favicon.ico")
        assert icon.content_type == "image/x-icon"
        assert Image.open(io.BytesIO(await icon.read())).format == "ICO"


def test_the_icon_has_the_usual_sizes() -> None:
    sizes = Image.open(io.BytesIO(favicon_ico())).info["sizes"]
    assert {(16, 16), (32, 32), (48, 48)} <= set(sizes)


def test_ipv6_hosts_go_in_brackets() -> None:
    assert url_host("::1") == url_host("[::1]") == "[::1]"
    assert url_host("fe80::1%eth0") == "[fe80::1%eth0]"
    assert url_host("127.0.0.1") == "127.0.0.1" and url_host("localhost") == "localhost"


def _ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6) as s:
            s.bind(("::1", 0))
        return True
    except OSError:
        return False


@pytest.mark.skipif(not _ipv6_loopback(), reason="this machine has no IPv6 loopback")
def test_serve_on_ipv6_prints_the_address_that_serves_the_page(tmp_path: Path) -> None:
    """The command as a user runs it: the address it prints opens the page."""
    with socket.socket(socket.AF_INET6) as s:
        s.bind(("::1", 0))
        port = s.getsockname()[1]
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
        "RACER_TUI_DATA_DIR": str(tmp_path / "data"),
        "RACER_TUI_CONFIG_DIR": str(tmp_path / "config"),
    }
    log = tmp_path / "serve.log"
    cmd = [sys.executable, "-m", "racer_tui.cli", "serve", "--host", "::1", "--port", str(port)]
    with log.open("w") as out:
        proc = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        page = None
        while page is None:
            assert proc.poll() is None, log.read_text()
            assert time.monotonic() < deadline, f"no page within 60 s: {log.read_text()}"
            url = re.search(r"serving on (\S+)", log.read_text())
            if url:
                assert url[1] == f"http://[::1]:{port}"
                try:
                    with urllib.request.urlopen(url[1], timeout=5) as response:
                        page = response.read().decode()
                except OSError:
                    time.sleep(0.2)  # printed just before it listens
            else:
                time.sleep(0.2)
        assert "<title>racer-tui</title>" in page
        with urllib.request.urlopen(f"http://[::1]:{port}/favicon.ico", timeout=5) as response:
            assert response.status == 200
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)


async def _handshake(client: TestClient, **headers: str) -> int:
    """The status of a WebSocket upgrade to /ws with `headers` (101: accepted)."""
    try:
        ws = await asyncio.wait_for(client.ws_connect("/ws", headers=headers), 20)
    except aiohttp.WSServerHandshakeError as refused:
        return refused.status
    await ws.close()
    return 101


async def test_other_pages_cannot_drive_the_app() -> None:
    """A WebSocket from another origin, and any request naming another Host
    (DNS rebinding), are refused; the page's own origin still connects."""
    server = PageServer("true", "127.0.0.1", 0)
    async with TestServer(await server._make_app(), host="127.0.0.1") as site, TestClient(site) as client:
        port = site.port
        own = f"127.0.0.1:{port}"
        assert await _handshake(client, Origin=f"http://{own}") == 101
        assert await _handshake(client) == 101  # no Origin: a program, not a page
        assert await _handshake(client, Origin="https://attacker.example") == 403
        assert await _handshake(client, Origin=f"http://localhost:{port}") == 403  # another origin, even so
        assert await _handshake(client, Origin="null") == 403
        rebound = f"attacker.example:{port}"
        assert await _handshake(client, Host=rebound, Origin=f"http://{rebound}") == 403
        assert (await client.get("/", headers={"Host": rebound})).status == 403
        assert (await client.get("/", headers={"Host": f"127.0.0.1:{port + 1}"})).status == 403
        refused = await client.get("/", headers={"Host": rebound})
        assert "Host 'attacker.example" in await refused.text()
        for name in ("localhost", "127.0.0.1"):
            assert (await client.get("/", headers={"Host": f"{name}:{port}"})).status == 200
            assert await _handshake(client, Host=f"{name}:{port}", Origin=f"http://{name}:{port}") == 101


async def test_allow_remote_accepts_any_host_but_not_another_origin() -> None:
    server = PageServer("true", "127.0.0.1", 0, allow_remote=True)
    async with TestServer(await server._make_app(), host="127.0.0.1") as site, TestClient(site) as client:
        named = f"racer-box.lan:{site.port}"
        assert (await client.get("/", headers={"Host": named})).status == 200
        assert await _handshake(client, Host=named, Origin=f"http://{named}") == 101
        assert await _handshake(client, Host=named, Origin="https://attacker.example") == 403


def test_host_headers_are_read_with_their_port() -> None:
    assert split_host("localhost:8000") == ("localhost", 8000)
    assert split_host("[::1]:8000") == ("[::1]", 8000)
    assert split_host("127.0.0.1") == ("127.0.0.1", None)
    assert split_host("Attacker.Example:1") == ("attacker.example", 1)
