"""The op registry: one pure-torch reference per op, device implementations registered against it.

Each op is defined once (`OpRegistry.define`) by its reference, the function that states its
semantics in plain torch. Implementations (`npu` on Ascend through `torch_npu`, `cuda` through
torch's own fused kernels) register against the op with the platforms they are the default on.
`OpRegistry.select` picks one implementation per op, once, at start-up: the override named for
the op if any, else the first implementation registered for the platform, else the reference.
The choice is logged, and the resulting `OpTable` is plain attribute access afterwards, so there
is no per-call dispatch on the hot path.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

logger = logging.getLogger(__name__)

REFERENCE = "reference"


@dataclass(frozen=True)
class Implementation:
    """One way of computing an op.

    Attributes:
        name: `reference`, `npu` or `cuda`; the name used in `ASCEND_ROUTER_OP_IMPL`.
        fn: the callable, with the op's signature.
        platforms: platforms (`npu`, `cuda`, `cpu`) on which it is the default choice.
        portable: pure torch that runs on any device (so CPU tests and `ops-check --all-impls`
            can exercise it); False for implementations that call a vendor module.
    """

    name: str
    fn: Callable[..., Any]
    platforms: frozenset[str]
    portable: bool


@dataclass(frozen=True)
class OpDef:
    """An op: its reference and the device implementations registered against it.

    Attributes:
        name: op name, e.g. `rms_norm`.
        summary: one line saying what it computes.
        reference: the pure-torch definition (also an `Implementation`, named `reference`).
        impls: device implementations in registration order.
    """

    name: str
    summary: str
    reference: Implementation
    impls: tuple[Implementation, ...] = ()

    def implementations(self) -> tuple[Implementation, ...]:
        """The reference followed by every device implementation."""
        return (self.reference, *self.impls)

    def implementation(self, name: str) -> Implementation:
        """The implementation called `name`.

        Raises:
            ValueError: no implementation of this op has that name.
        """
        for impl in self.implementations():
            if impl.name == name:
                return impl
        known = ", ".join(i.name for i in self.implementations())
        raise ValueError(f"op {self.name!r} has no implementation {name!r}; choose one of: {known}")

    def default_for(self, platform: str) -> Implementation:
        """The first implementation registered for `platform`, else the reference."""
        for impl in self.impls:
            if platform in impl.platforms:
                return impl
        return self.reference


@dataclass(frozen=True)
class OpTable:
    """The implementation chosen for every op; ops are attributes (`table.rms_norm(x, w, eps)`).

    Attributes:
        platform: the platform the choice was made for.
        choices: op name → chosen implementation.
        overridden: op names whose choice came from an override.
    """

    platform: str
    choices: Mapping[str, Implementation]
    overridden: frozenset[str] = field(default_factory=frozenset)

    def __getattr__(self, name: str) -> Callable[..., Any]:
        choices = self.__dict__.get("choices", {})
        if name in choices:
            return choices[name].fn
        raise AttributeError(f"no op named {name!r}; known ops: {', '.join(choices)}")

    def impl_name(self, op: str) -> str:
        """Name of the implementation chosen for `op`."""
        return self.choices[op].name

    def summary(self) -> str:
        """`op=impl` pairs, overrides marked with `*`, for the start-up log line."""
        return ", ".join(
            f"{op}={impl.name}{'*' if op in self.overridden else ''}"
            for op, impl in self.choices.items()
        )


class OpRegistry:
    """Ops by name, each with its reference and device implementations."""

    def __init__(self) -> None:
        self._ops: dict[str, OpDef] = {}

    def define(self, name: str, reference: Callable[..., Any], summary: str) -> None:
        """Define op `name` by its pure-torch reference.

        Raises:
            ValueError: the op is already defined.
        """
        if name in self._ops:
            raise ValueError(f"op {name!r} is already defined")
        ref = Implementation(REFERENCE, reference, frozenset(), portable=True)
        self._ops[name] = OpDef(name, summary, ref)

    def register(
        self,
        op: str,
        name: str,
        fn: Callable[..., Any],
        platforms: tuple[str, ...],
        *,
        portable: bool = False,
    ) -> None:
        """Register implementation `name` of `op`, the default on `platforms`.

        Raises:
            ValueError: the op is unknown, or already has an implementation called `name`.
        """
        opdef = self.get(op)
        if name in (i.name for i in opdef.implementations()):
            raise ValueError(f"op {op!r} already has an implementation {name!r}")
        impl = Implementation(name, fn, frozenset(platforms), portable)
        self._ops[op] = OpDef(opdef.name, opdef.summary, opdef.reference, (*opdef.impls, impl))

    def get(self, name: str) -> OpDef:
        """The op called `name`.

        Raises:
            ValueError: no such op.
        """
        try:
            return self._ops[name]
        except KeyError:
            raise ValueError(f"unknown op {name!r}; known ops: {', '.join(self._ops)}") from None

    def __iter__(self) -> Iterator[OpDef]:
        return iter(self._ops.values())

    def names(self) -> list[str]:
        """Op names in definition order."""
        return list(self._ops)

    def select(self, platform: str, overrides: Mapping[str, str] | None = None) -> OpTable:
        """Choose one implementation per op for `platform` and log the choice.

        Args:
            platform: `npu`, `cuda` or `cpu`.
            overrides: op name → implementation name, e.g. from `ASCEND_ROUTER_OP_IMPL`.

        Raises:
            ValueError: an override names an unknown op or implementation.
        """
        overrides = dict(overrides or {})
        for op in overrides:
            self.get(op)  # unknown op names fail here, before anything runs
        choices = {
            name: opdef.implementation(overrides[name])
            if name in overrides
            else opdef.default_for(platform)
            for name, opdef in self._ops.items()
        }
        table = OpTable(platform, choices, frozenset(overrides))
        logger.info("ops for %s (* = ASCEND_ROUTER_OP_IMPL): %s", platform, table.summary())
        return table
