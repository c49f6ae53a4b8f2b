"""The routing decision: request features + model states → ordered candidates. Pure and cheap."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from configs.policy_config import AUTO_ALIAS
from router.policy.capabilities import check_capabilities
from router.policy.errors import NoHealthyModel, NoModelCanServe, UnknownModel
from router.policy.features import ModelState
from router.policy.match import condition_matches

if TYPE_CHECKING:
    from configs.policy_config import ModelCapabilities, PolicyConfig, Rule
    from router.policy.features import RequestFeatures

# A model with no reported state yet (e.g. just started) is assumed healthy and idle.
_UNREPORTED = ModelState()


@dataclass(frozen=True)
class Decision:
    """Where to send one request.

    Attributes:
        candidates: Model ids to try in order (the next one on failure before the first token).
            Saturated models are kept; the caller answers 429 when all of them are saturated.
        rule: What decided: a rule name, `alias:<name>` (an alias with no rule matching),
            `model:<id>` (an exact model id) or `default` (`auto` with no rule matching).
        reason: Human-readable explanation, for logs and the decision response header.
        rejected: Model id → why it was filtered out of the candidates.
    """

    candidates: tuple[str, ...]
    rule: str
    reason: str
    rejected: dict[str, str] = field(default_factory=dict)


def decide(
    features: RequestFeatures,
    models: dict[str, ModelCapabilities],
    states: dict[str, ModelState],
    policy: PolicyConfig,
) -> Decision:
    """Decide which models may serve a request, best first.

    An exact model id pins that model. A name that is neither, but matches a `model_names`
    pattern, routes as the pattern's model or alias (the reason names the pattern). An alias
    (an omitted `model` is `auto`) goes through the rules in order, skipping rules none of
    whose targets is in the alias; the first whose condition holds wins and its targets,
    restricted to the alias's models, are the candidates.
    With no rule matching, `auto` uses `default_targets` and any other alias its own models.
    Then models that lack a needed capability (an input modality, context, tools, structured
    output, streaming) or are unhealthy are filtered out; `least_loaded` rules sort what is
    left by load.

    Args:
        features: The request's features (`extract_features`).
        models: Served model id → capabilities.
        states: Model id → live state; a model missing here is treated as healthy and idle.
        policy: The routing policy, already checked with `configs.policy_validation.check_policy`.

    Returns:
        The decision; `candidates` is never empty.

    Raises:
        UnknownModel: `model` is neither a served model id nor an alias, and matches no
            `model_names` pattern (HTTP 404).
        NoModelCanServe: No candidate has the capabilities the request needs (HTTP 400); when a
            candidate lacks one of the request's modalities, the message ends with the served
            models that take it, e.g. `models taking audio input: none`.
        NoHealthyModel: Capable candidates exist but none is healthy (HTTP 503).
    """
    requested = features.model if features.model is not None else AUTO_ALIAS
    name, pattern = policy.resolve_name(requested, models)
    targets, pick, label, why = _plan(name, features, models, policy)
    if pattern is not None:
        why = f"model {requested!r} matched model_names pattern {pattern.pattern!r}; {why}"
    return _filter(targets, pick, label, why, features, models, states)


_Pick = Literal["ordered", "least_loaded"]


def _plan(
    requested: str,
    features: RequestFeatures,
    models: dict[str, ModelCapabilities],
    policy: PolicyConfig,
) -> tuple[list[str], _Pick, str, str]:
    """Targets before filtering, how to order them, the decision label and why."""
    if requested in models:
        return [requested], "ordered", f"model:{requested}", f"model {requested!r} requested by id"
    alias_models = policy.alias_models(requested)
    if alias_models is None:
        raise UnknownModel(
            f"model {requested!r} does not exist: use a served model id {sorted(models)} or an "
            f"alias {sorted(policy.alias_names())}",
            param="model",
        )
    rule = _first_match(features, policy, requested)
    if rule is not None:
        in_alias = set(alias_models)
        targets = [target for target in rule.targets if target in in_alias]
        why = f"rule {rule.name!r} matched ({rule.when.describe()}) for alias {requested!r}"
        return targets, rule.pick, rule.name, why
    if requested == AUTO_ALIAS:
        why = "no rule matched alias 'auto'; using default_targets"
        return policy.fallback_targets(), "ordered", "default", why
    why = f"no rule matched alias {requested!r}; using its models"
    return alias_models, "ordered", f"alias:{requested}", why


def _first_match(features: RequestFeatures, policy: PolicyConfig, alias: str) -> Rule | None:
    for rule in policy.rules:
        if alias in policy.rule_aliases(rule) and condition_matches(rule.when, features, alias):
            return rule
    return None


def _filter(
    targets: list[str],
    pick: _Pick,
    label: str,
    why: str,
    features: RequestFeatures,
    models: dict[str, ModelCapabilities],
    states: dict[str, ModelState],
) -> Decision:
    """Drop incapable and unhealthy targets, order the rest, and explain."""
    assert targets, f"{label}: no targets to choose from; check_policy forbids this"
    rejected: dict[str, str] = {}
    params: list[str] = []
    eligible: list[str] = []
    by_estimate: list[str] = []
    any_capable = False
    for model in targets:
        caps = models.get(model)
        assert caps is not None, (
            f"policy names unserved model {model!r}; run configs.policy_validation.check_policy"
        )
        rejection = check_capabilities(features, caps)
        healthy = states.get(model, _UNREPORTED).healthy
        if rejection is not None:
            rejected[model] = rejection.reason
            params.append(rejection.param)
            if rejection.estimated and healthy:
                by_estimate.append(model)
        elif not healthy:
            any_capable = True
            rejected[model] = "unhealthy"
        else:
            eligible.append(model)
    detail = "; ".join(f"{model}: {reason}" for model, reason in rejected.items())
    if not eligible and by_estimate:
        # the estimate only routes: the longest context tries it, and counts exactly
        eligible = sorted(by_estimate, key=lambda m: -models[m].context_length)
        why += "; no context fits the estimate, so the longest context counts exactly"
    elif not eligible:
        if any_capable:
            raise NoHealthyModel(
                f"no healthy model can serve this request ({why}): {detail}", rejected
            )
        takers = _modality_takers(features, targets, models)
        raise NoModelCanServe(
            f"no model can serve this request ({why}): {detail}{takers}", params[0], rejected
        )
    reason = why
    if pick == "least_loaded":
        # sorted() is stable, so equal loads keep the rule's preference order.
        eligible = sorted(eligible, key=lambda model: states.get(model, _UNREPORTED).load)
        reason += "; least loaded first"
    if rejected:
        reason += f"; filtered out {detail}"
    return Decision(candidates=tuple(eligible), rule=label, reason=reason, rejected=rejected)


def _modality_takers(
    features: RequestFeatures, targets: list[str], models: dict[str, ModelCapabilities]
) -> str:
    """For each of the request's media modalities some target lacks, the served models that
    take it (where the client could send the request instead), as a message suffix."""
    suffix = ""
    for modality in features.media:
        if all(modality in models[target].input_modalities for target in targets):
            continue
        takers = [model for model, caps in models.items() if modality in caps.input_modalities]
        suffix += f"; models taking {modality} input: {', '.join(takers) or 'none'}"
    return suffix
