"""Fetching an image URL without reaching the replica's own network: the host is resolved
first and every address it resolves to must be public (not private, loopback, link-local,
shared, multicast or reserved: `ipaddress`'s `is_global`), the same check runs again on each
redirect, and the whole fetch is bounded in bytes and seconds. Hosts in
`media.allowed_url_hosts` skip the address check (an internal image store).

Known gap: httpx resolves the host again when it connects, so a DNS server that answers
differently the second time (DNS rebinding) is not caught here; a network policy is the
complete guard.
"""

from __future__ import annotations

import ipaddress
import socket
import time
from urllib.parse import urljoin, urlsplit

import httpx

from configs.media_limits import MediaLimits
from deployments.media.errors import bad_media, reason, too_big

MAX_REDIRECTS = 5
"""Redirects followed before the fetch is refused."""


def check_public(url: str, limits: MediaLimits, param: str) -> None:
    """Check that `url` is http(s) and its host resolves to public addresses only.

    Raises:
        OpenAIError: 400 for another scheme, a host that does not resolve, or one address that
            is not global (unless the host is in `limits.allowed_url_hosts`).
    """
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise bad_media(param, f"cannot fetch {url[:100]!r}: only http(s) URLs with a host")
    host = parts.hostname
    if host in limits.allowed_url_hosts:
        return
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (OSError, ValueError) as exc:
        raise bad_media(param, f"cannot resolve the host {host!r}: {reason(exc)}") from None
    for info in infos:
        address = ipaddress.ip_address(str(info[4][0]).split("%")[0])  # drop an IPv6 zone
        mapped = getattr(address, "ipv4_mapped", None)
        if not _public(address) or (mapped is not None and not _public(mapped)):
            raise bad_media(
                param,
                f"the host {host!r} resolves to {address}, a private, loopback, link-local or "
                "reserved address, which is not fetched (media.allowed_url_hosts lists hosts "
                "that may be)",
            )


def _public(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    return address.is_global and not address.is_multicast


def fetch_url(url: str, limits: MediaLimits, param: str) -> bytes:
    """The body of `url`, following up to `MAX_REDIRECTS` redirects, each checked.

    Raises:
        OpenAIError: 400 for an address refused by `check_public`, a status other than 200,
            too many redirects, a network failure or more than `url_timeout_s` in all; 413 for
            a body over `max_item_bytes`.
    """
    deadline = time.monotonic() + limits.url_timeout_s
    with httpx.Client(follow_redirects=False) as client:
        for _ in range(MAX_REDIRECTS + 1):
            check_public(url, limits, param)
            left = deadline - time.monotonic()
            try:
                with client.stream("GET", url, timeout=max(left, 0.001)) as response:
                    if response.is_redirect:
                        url = urljoin(url, response.headers["location"])
                        continue
                    if response.status_code != 200:
                        raise bad_media(param, f"fetching the URL gave HTTP {response.status_code}")
                    return _body(response, limits, param, deadline)
            except httpx.HTTPError as exc:
                why = f"{type(exc).__name__}: {reason(exc)}"
                raise bad_media(param, f"fetching the URL failed: {why}") from None
    raise bad_media(param, f"the URL redirects more than {MAX_REDIRECTS} times")


def _body(response: httpx.Response, limits: MediaLimits, param: str, deadline: float) -> bytes:
    cap = limits.max_item_bytes
    declared = response.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > cap:
        raise too_big(param, declared, cap)
    body = bytearray()
    for chunk in response.iter_bytes():
        body += chunk
        if len(body) > cap:
            raise too_big(param, f"over {cap}", cap)
        if time.monotonic() > deadline:
            raise bad_media(param, "fetching the URL took over media.url_timeout_s")
    return bytes(body)
