"""Clients for the shared Ray Serve instance."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import openai
import pytest


@pytest.fixture(scope="session")
def http(serve_url: str) -> Iterator[httpx.Client]:
    """A plain HTTP client on the server."""
    with httpx.Client(base_url=serve_url, timeout=120) as client:
        yield client


@pytest.fixture(scope="session")
def client(serve_url: str) -> openai.OpenAI:
    """The official `openai` client on the server."""
    return openai.OpenAI(base_url=f"{serve_url}/v1", api_key="unused", max_retries=0)
