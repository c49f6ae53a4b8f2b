"""API keys named in the config (`rate_limits.keys`, `priorities.keys`): an entry's name stands
for its key in errors and metrics, so each key has one entry per section."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol


class NamedKey(Protocol):
    """An entry that names one API key."""

    @property
    def api_key(self) -> str: ...


def key_names(entries: Mapping[str, NamedKey], where: str) -> dict[str, str]:
    """API key -> the name of its entry.

    Args:
        entries: Name -> entry, as configured under `where`.
        where: The config section, e.g. `rate_limits.keys`, for errors.

    Raises:
        ValueError: Two entries name the same key.
    """
    names: dict[str, str] = {}
    for name, entry in entries.items():
        if entry.api_key in names:
            raise ValueError(
                f"{where}.{name} and {where}.{names[entry.api_key]} name the same api_key: "
                "give each key one entry"
            )
        names[entry.api_key] = name
    return names


def check_known_keys(entries: Mapping[str, NamedKey], where: str, api_keys: Sequence[str]) -> None:
    """With `api_keys` configured, every entry's key must be one of them (else it never matches).

    Raises:
        ValueError: Naming the entry.
    """
    if not api_keys:
        return
    for name, entry in entries.items():
        if entry.api_key not in api_keys:
            raise ValueError(
                f"{where}.{name}.api_key is not one of api_keys: a request presenting it would "
                "be refused (401), so the entry would never apply"
            )
