"""Priority levels of the router (`args.priorities`): which level a request runs at, and each
tenant's share of a saturated model.

Example (YAML)::

    priorities:
      levels: [interactive, standard, batch]   # most urgent first
      default: standard
      tenants:                                  # `x-ascend-router-tenant` values
        acme: {level: interactive, weight: 3}
        nightly: {level: batch}
      keys:                                     # like `rate_limits.keys`
        batch-jobs: {api_key: sk-batch-1, level: batch}

A level's engine priority is its index (vLLM's convention: a lower value runs first), so
`interactive` runs at 0 and `batch` at 2. A request is *placed* at the first of: its tenant's
entry, its key's entry, the `priority` of the policy rule that decided it, else `default`. It
may *ask* for a level with the `x-ascend-router-priority` header (a level name; an unknown one
is a 400 naming the levels) or the body's `priority` (a level index): it gets what it asks only
when that is not more urgent than its placed level, so a caller can lower itself but never jump
ahead (an index past the last level is the last). Without `priorities` every request runs at
priority 0, the header is only a policy feature, and the body's `priority` is ignored.

When a model is saturated, the router queues requests per model: most urgent level first, then
deficit round-robin across tenants by `weight` (`router.admission`). `reserved_slots` of every
replica are kept for the most urgent level.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, model_validator

from configs.named_keys import key_names

_FROZEN = ConfigDict(extra="forbid", frozen=True)


class TenantPriority(BaseModel):
    """One tenant's level and its share of a saturated model's queue."""

    model_config = _FROZEN

    level: str | None = Field(
        None, description="The level its requests are placed at (default: `default`)."
    )
    weight: int = Field(
        1,
        ge=1,
        description="Requests released from a model's queue per round-robin turn, against 1 for "
        "a tenant without an entry (within one level).",
    )


class KeyPriority(BaseModel):
    """The level of one named API key's requests."""

    model_config = _FROZEN

    api_key: str = Field(min_length=1, description="The key (one of `api_keys`).")
    level: str = Field(description="The level its requests are placed at.")


class Priorities(BaseModel):
    """Priority levels, and the tenants and keys placed at them."""

    model_config = _FROZEN

    levels: list[str] = Field(
        min_length=1,
        description="Level names, most urgent first; a level's engine priority is its index.",
    )
    default: str = Field(description="The level of a request that no entry places.")
    tenants: dict[str, TenantPriority] = Field(
        default_factory=dict, description="`x-ascend-router-tenant` value -> its level, weight."
    )
    reserved_slots: int = Field(
        0,
        ge=0,
        description="Slots (of `max_ongoing_requests`) of every replica that only the most "
        "urgent level may take: the other levels share the rest, so an urgent request starts at "
        "once while less urgent ones fill the model.",
    )
    keys: dict[str, KeyPriority] = Field(
        default_factory=dict,
        description="Name -> the level of one API key; the name (never the key) is what errors "
        "show.",
    )
    _key_names: dict[str, str] = PrivateAttr(default_factory=dict)

    @model_validator(mode="after")
    def _known_levels(self) -> Priorities:
        if len(set(self.levels)) != len(self.levels):
            raise ValueError(f"priorities.levels {self.levels} repeat a name: give each once")
        used: dict[str, str | None] = {"priorities.default": self.default}
        used |= {f"priorities.tenants.{t}.level": e.level for t, e in self.tenants.items()}
        used |= {f"priorities.keys.{k}.level": e.level for k, e in self.keys.items()}
        for where, level in used.items():
            if level is not None and level not in self.levels:
                raise ValueError(f"{where} is {level!r}, not a level: the levels are {self.levels}")
        self._key_names = key_names(self.keys, "priorities.keys")
        return self

    def index(self, level: str) -> int:
        """The engine priority of `level` (its index in `levels`)."""
        return self.levels.index(level)

    def placed(self, tenant: str | None, api_key: str | None, rule_level: str | None = None) -> int:
        """The engine priority a request is placed at: its tenant's level, else the level of
        the key it presents (`api_key`), else the level of the policy rule that decided it
        (`rule_level`), else `default`."""
        entry = self.tenants.get(tenant) if tenant else None
        if entry is not None and entry.level is not None:
            return self.index(entry.level)
        name = self._key_names.get(api_key) if api_key else None
        if name is not None:
            return self.index(self.keys[name].level)
        return self.index(rule_level or self.default)

    def weight(self, tenant: str) -> int:
        """A tenant's round-robin weight (1 without an entry)."""
        entry = self.tenants.get(tenant)
        return 1 if entry is None else entry.weight
