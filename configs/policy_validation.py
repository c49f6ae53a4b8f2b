"""Start-up checks of a routing `PolicyConfig` against the served models (`check_policy`).

Every error names the rule or alias at fault, the bad value and what to change, so an operator
can fix the Serve config without reading this code.
"""

from __future__ import annotations

from collections.abc import Sequence

from configs.policy_config import Condition, ModelCapabilities, PolicyConfig, Rule

_TOKEN_FIELDS = ("max_tokens_lte", "max_tokens_gte", "prompt_tokens_gt", "prompt_tokens_lte")
_LIST_FIELDS = ("model", "tool_choice", "response_format", "tenant", "priority")
_UPPER_BOUNDS = ("temperature_lte", "top_p_lte", "max_tokens_lte", "prompt_tokens_lte")
_LOWER_BOUNDS = ("temperature_gte", "max_tokens_gte", "prompt_tokens_gt")
_SET_FIELDS = ("tool_choice", "response_format", "tenant", "priority")
_EXACT_FIELDS = ("stream", "has_tools", "has_image", "has_audio")


def check_policy(policy: PolicyConfig, models: dict[str, ModelCapabilities]) -> None:
    """Check the policy against the served models; call once at start-up.

    Args:
        policy: The parsed policy.
        models: Served model id → its capabilities.

    Raises:
        ValueError: For the first problem, naming the rule or alias and the bad value: an
            unknown model id, an alias named like a model, a bad threshold (negative tokens,
            temperature outside [0, 2], top_p outside [0, 1], an empty range), an empty list, a
            duplicate rule name, a rule that can never be reached or never yield a capable
            target (e.g. `has_audio: true` with no target taking audio), a `model_names`
            pattern that maps to neither a model nor an alias.
    """
    for name in policy.alias_names():
        if name in models:
            raise ValueError(
                f"alias {name!r} has the same name as a served model; rename the alias"
            )
    for name, ids in policy.aliases.items():
        _check_ids(f"alias {name!r}", ids, models)
    if policy.default_targets is not None:
        _check_ids("default_targets", policy.default_targets, models)
        auto = policy.aliases.get("auto")
        outside = [m for m in policy.default_targets if auto is not None and m not in auto]
        if outside:
            raise ValueError(
                f"default_targets names {outside[0]!r}, which is not in alias 'auto' {auto}; "
                "add it to the alias or drop it from default_targets"
            )
    for pattern in policy.model_names:
        if pattern.model not in models and policy.alias_models(pattern.model) is None:
            raise ValueError(
                f"model_names pattern {pattern.pattern!r} maps to {pattern.model!r}, which is "
                f"neither a served model {sorted(models)} nor an alias "
                f"{sorted(policy.alias_names())}"
            )
    seen: set[str] = set()
    for index, rule in enumerate(policy.rules):
        if rule.name in seen:
            raise ValueError(f"rule {rule.name!r} is defined twice; rule names must be unique")
        seen.add(rule.name)
        where = f"rule {rule.name!r}"
        _check_ids(f"{where} targets", rule.targets, models)
        _check_condition(where, rule.when, policy, models)
        _check_scope(where, rule, policy)
        _check_feasible(where, rule, models)
        _check_reachable(where, rule, policy.rules[:index], policy)


def _check_ids(where: str, ids: Sequence[str], models: dict[str, ModelCapabilities]) -> None:
    if not ids:
        raise ValueError(f"{where} lists no models; name at least one of {sorted(models)}")
    for model in ids:
        if model not in models:
            raise ValueError(
                f"{where} names unknown model {model!r}; served models are {sorted(models)}"
            )
    duplicates = sorted({model for model in ids if ids.count(model) > 1})
    if duplicates:
        raise ValueError(f"{where} lists model {duplicates[0]!r} more than once")


def _check_condition(
    where: str, when: Condition, policy: PolicyConfig, models: dict[str, ModelCapabilities]
) -> None:
    """Thresholds in range, non-empty ranges and lists, and `model` naming aliases only."""
    for name in _TOKEN_FIELDS:
        value = getattr(when, name)
        if value is not None and value < 0:
            raise ValueError(f"{where}: when.{name} is {value}; token counts must be ≥ 0")
    for name in ("temperature_lte", "temperature_gte"):
        value = getattr(when, name)
        if value is not None and not 0 <= value <= 2:
            raise ValueError(f"{where}: when.{name} is {value}; temperature must be in [0, 2]")
    if when.top_p_lte is not None and not 0 <= when.top_p_lte <= 1:
        raise ValueError(f"{where}: when.top_p_lte is {when.top_p_lte}; top_p must be in [0, 1]")
    for low, high in (("temperature_gte", "temperature_lte"), ("max_tokens_gte", "max_tokens_lte")):
        lo, hi = getattr(when, low), getattr(when, high)
        if lo is not None and hi is not None and hi < lo:
            raise ValueError(
                f"{where}: when.{high} {hi} < when.{low} {lo}, so no request can match; "
                "swap or widen the bounds"
            )
    gt, lte = when.prompt_tokens_gt, when.prompt_tokens_lte
    if gt is not None and lte is not None and lte <= gt:
        raise ValueError(
            f"{where}: when.prompt_tokens_lte {lte} ≤ when.prompt_tokens_gt {gt}, so no request "
            "can match; widen the bounds"
        )
    for name in _LIST_FIELDS:
        if getattr(when, name) == []:
            raise ValueError(f"{where}: when.{name} is empty, so no request can match; omit it")
    for alias in when.model or ():
        if alias in models:
            raise ValueError(
                f"{where}: when.model names model id {alias!r}; a request for an exact model id "
                "is pinned to it and skips the rules, so name aliases here"
            )
        if policy.alias_models(alias) is None:
            raise ValueError(
                f"{where}: when.model names unknown alias {alias!r}; aliases are "
                f"{sorted(policy.alias_names())}"
            )


def _check_scope(where: str, rule: Rule, policy: PolicyConfig) -> None:
    """A rule fires for an alias only if it targets one of the alias's models."""
    named = rule.when.model if rule.when.model is not None else policy.alias_names()
    scope = policy.rule_aliases(rule)
    if not scope:
        raise ValueError(
            f"{where}: none of its targets {rule.targets} belongs to an alias it applies to "
            f"{sorted(named)}, so it can never fire; add a target from those aliases"
        )
    unused = sorted(set(named) - scope) if rule.when.model is not None else []
    if unused:
        raise ValueError(
            f"{where}: when.model names alias {unused[0]!r}, but none of its targets "
            f"{rule.targets} is in that alias; add one or drop the alias from when.model"
        )


def _check_feasible(where: str, rule: Rule, models: dict[str, ModelCapabilities]) -> None:
    """Reject a rule whose condition needs a capability none of its targets has."""
    when = rule.when
    caps = [models[target] for target in rule.targets]
    json_only = when.response_format is not None and "text" not in when.response_format
    min_prompt = when.prompt_tokens_gt + 1 if when.prompt_tokens_gt is not None else 0
    min_completion = when.max_tokens_gte or 0
    needs = {
        "supports_tools (when.has_tools is true)": (
            when.has_tools is True and not any(c.supports_tools for c in caps)
        ),
        "supports_structured_output (when.response_format allows only JSON)": (
            json_only and not any(c.supports_structured_output for c in caps)
        ),
        "supports_streaming (when.stream is true)": (
            when.stream is True and not any(c.supports_streaming for c in caps)
        ),
        "'image' in input_modalities (when.has_image is true)": (
            when.has_image is True and not any("image" in c.input_modalities for c in caps)
        ),
        "'audio' in input_modalities (when.has_audio is true)": (
            when.has_audio is True and not any("audio" in c.input_modalities for c in caps)
        ),
        f"a context fitting its smallest request (~{min_prompt} prompt + {min_completion} "
        "completion tokens)": all(
            min_prompt >= c.context_length or min_prompt + min_completion > c.context_length
            for c in caps
        ),
    }
    for need, missing in needs.items():
        if missing:
            raise ValueError(
                f"{where}: none of its targets {rule.targets} has {need}, so every request it "
                "matches would be rejected; add a capable target or change the condition"
            )


def _check_reachable(where: str, rule: Rule, earlier: Sequence[Rule], policy: PolicyConfig) -> None:
    """Reject a rule every matching request of which an earlier rule already takes."""
    scope = policy.rule_aliases(rule)
    for prior in earlier:
        if scope <= policy.rule_aliases(prior) and _covers(prior.when, rule.when):
            raise ValueError(
                f"{where} is unreachable: earlier rule {prior.name!r} "
                f"({prior.when.describe()}) matches every request it matches "
                f"({rule.when.describe()}); reorder the rules or narrow {prior.name!r}"
            )


def _covers(earlier: Condition, later: Condition) -> bool:
    """Whether every request matching `later` also matches `earlier` (ignoring `model`).

    Conservative: only field-by-field containment is detected, so a `True` is always right.
    """
    for name in _SET_FIELDS:
        outer, inner = getattr(earlier, name), getattr(later, name)
        if outer is not None and (inner is None or not set(inner) <= set(outer)):
            return False
    for name in _EXACT_FIELDS:
        outer, inner = getattr(earlier, name), getattr(later, name)
        if outer is not None and inner != outer:
            return False
    for name in _UPPER_BOUNDS:
        outer, inner = getattr(earlier, name), getattr(later, name)
        if outer is not None and (inner is None or inner > outer):
            return False
    for name in _LOWER_BOUNDS:
        outer, inner = getattr(earlier, name), getattr(later, name)
        if outer is not None and (inner is None or inner < outer):
            return False
    return True
