"""Image URLs: fetched only when the model allows URLs, never from the replica's own network
(private, loopback, link-local, reserved addresses; also after a redirect) unless the host is
listed, and within a byte limit. A real HTTP server on 127.0.0.1 serves the files."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from configs.media_limits import MediaLimits
from deployments.media.sources import read_image_url
from deployments.media.url_fetch import check_public
from deployments.protocol.errors import OpenAIError
from fixtures.media_files import png_bytes

PART = "messages[0].content[0].image_url.url"
PNG = png_bytes(16, 16)


class _Files(BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        port = self.server.server_address[1]
        routes = {
            "/cat.png": (200, {}, PNG),
            "/big.png": (200, {}, b"\0" * 5000),
            "/missing.png": (404, {}, b""),
            "/to-cat": (302, {"Location": "/cat.png"}, b""),
            "/to-localhost": (302, {"Location": f"http://localhost:{port}/cat.png"}, b""),
        }
        status, headers, body = routes.get(self.path, (404, {}, b""))
        self.send_response(status)
        for name, value in {**headers, "Content-Length": str(len(body))}.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Files)
    thread = threading.Thread(target=httpd.serve_forever, args=(0.01,), daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


def limits(**fields: object) -> MediaLimits:
    return MediaLimits.model_validate({"allow_urls": True, **fields})


def refused(url: str, lim: MediaLimits) -> OpenAIError:
    with pytest.raises(OpenAIError) as info:
        read_image_url(url, lim, PART)
    return info.value


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1/cat.png",
        "http://10.0.0.7/cat.png",
        "http://192.168.1.1/cat.png",
        "http://169.254.169.254/latest/meta-data/",
        "http://100.64.0.1/cat.png",
        "http://0.0.0.0/cat.png",
        "http://[::1]/cat.png",
        "http://[::ffff:127.0.0.1]/cat.png",
        "http://[fe80::1]/cat.png",
        "http://localhost/cat.png",
    ],
)
def test_private_addresses_are_refused(url: str) -> None:
    err = refused(url, limits())
    assert (err.status_code, err.param) == (400, PART)
    assert "media.allowed_url_hosts" in str(err)


def test_a_public_address_passes_the_check() -> None:
    check_public("https://93.184.215.14/cat.png", limits(), PART)  # an IP literal: no DNS


def test_urls_are_refused_unless_allowed(server: str) -> None:
    err = refused(f"{server}/cat.png", MediaLimits(allowed_url_hosts=["127.0.0.1"]))
    assert "media.allow_urls" in str(err)


def test_listed_host_is_fetched(server: str) -> None:
    assert read_image_url(f"{server}/cat.png", limits(allowed_url_hosts=["127.0.0.1"]), PART) == PNG


def test_redirects_are_followed_and_each_hop_checked(server: str) -> None:
    lim = limits(allowed_url_hosts=["127.0.0.1"])
    assert read_image_url(f"{server}/to-cat", lim, PART) == PNG
    err = refused(f"{server}/to-localhost", lim)
    assert "'localhost'" in str(err)


def test_body_over_the_byte_limit_is_a_413(server: str) -> None:
    err = refused(f"{server}/big.png", limits(allowed_url_hosts=["127.0.0.1"], max_item_bytes=1000))
    assert (err.status_code, err.code) == (413, "media_limit_exceeded")


def test_http_error_status_is_a_400(server: str) -> None:
    err = refused(f"{server}/missing.png", limits(allowed_url_hosts=["127.0.0.1"]))
    assert err.status_code == 400 and "HTTP 404" in str(err)
