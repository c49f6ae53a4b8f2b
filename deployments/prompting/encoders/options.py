"""A request's prompt knobs for the DeepSeek encoders: thinking mode, reasoning effort,
thinking retention and the response format.

Source: `shared/research/deepseek-v4.md` §3.3 (drop_thinking) and §3.4 (thinking mode and
effort; the knobs travel in `chat_template_kwargs` as with vLLM's `deepseek_v4` tokenizer mode).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from deployments.prompting.encoders import effort


@dataclass(frozen=True)
class EncodeOptions:
    """How to render one prompt.

    Attributes:
        thinking: thinking mode (the prompt ends `<｜Assistant｜><think>` and the model reasons
            first) or chat mode (it ends `<｜Assistant｜></think>`).
        reasoning_effort: a level of `effort_profile`'s ladder: `preview` takes None, `high`,
            `max`; `official` takes None (= `low`), `low`, `high`, `max`. Only thinking mode
            writes a prefix for it. DeepSeek-V3.2 has no effort levels and ignores it.
        drop_thinking: drop the reasoning of assistant turns before the last user turn (and
            developer messages before it), as the reference does by default; V4 turns it off
            whenever tools are declared.
        response_format: a JSON schema written into the system part as the reference's
            `## Response Format` section, or None.
        effort_profile: which ladder `reasoning_effort` belongs to (`effort.PREFIXES`).

    Raises:
        ValueError: an unknown profile, or a level that profile does not have.
    """

    thinking: bool
    reasoning_effort: str | None = None
    drop_thinking: bool = True
    response_format: dict[str, Any] | None = None
    effort_profile: str = effort.DEFAULT_PROFILE

    def __post_init__(self) -> None:
        levels = effort.PREFIXES[effort.check_profile(self.effort_profile)]
        if self.reasoning_effort not in levels:
            raise ValueError(
                f"reasoning_effort {self.reasoning_effort!r} is not a level of the "
                f"{self.effort_profile!r} profile; use one of {[k for k in levels if k]} or None"
            )


class OptionError(ValueError):
    """A request knob the encoders cannot take.

    Attributes:
        param: the request field to name in the error (`reasoning_effort`,
            `chat_template_kwargs.thinking`, ...).
    """

    def __init__(self, message: str, param: str) -> None:
        super().__init__(message)
        self.param = param


def _flag(kwargs: dict[str, Any], key: str) -> bool | None:
    value = kwargs.get(key)
    if value is not None and not isinstance(value, bool):
        raise OptionError(
            f"chat_template_kwargs.{key} must be true or false, not {value!r}",
            f"chat_template_kwargs.{key}",
        )
    return value


def resolve_options(
    chat_template_kwargs: dict[str, Any] | None,
    reasoning_effort: str | None,
    response_schema: dict[str, Any] | None,
    *,
    effort_profile: str = effort.DEFAULT_PROFILE,
) -> EncodeOptions:
    """A request's `EncodeOptions`.

    Thinking comes from `chat_template_kwargs["thinking"]` or `["enable_thinking"]` (booleans);
    without either, from the effort: OpenAI's `none` means off, any other value on; with no
    effort either, thinking is off (the default of vLLM's `deepseek_v4` tokenizer wrapper).
    `chat_template_kwargs` may also carry `reasoning_effort` (it wins over the request field)
    and `drop_thinking` (a boolean, default true). Other keys are ignored.

    The effort maps onto `effort_profile`'s ladder as DeepSeek's API documents (see
    `deployments.prompting.encoders.effort`): with the default `preview` ladder,
    `minimal`/`low`/`medium`/`high` -> `high` (no prefix, as no effort at all) and
    `xhigh`/`max` -> `max`; with `official`, `minimal`/`low` -> `low`, `medium`/`high` ->
    `high`, `xhigh`/`max` -> `max`.

    Args:
        chat_template_kwargs: the request's `chat_template_kwargs`, or None.
        reasoning_effort: the request's OpenAI `reasoning_effort`, or None.
        response_schema: the JSON schema of the request's `response_format`, or None.
        effort_profile: the deployment's ladder, `preview` or `official` (a property of the
            checkpoint's encoder, so not a request knob).

    Raises:
        OptionError: naming the field: `thinking`, `enable_thinking` or `drop_thinking` is not
            a boolean; `thinking` and `enable_thinking` disagree; the effort is not a string or
            not a known value; thinking is asked for with effort `none`.
        ValueError: an unknown profile.
    """
    kwargs = chat_template_kwargs or {}
    thinking = _flag(kwargs, "thinking")
    enable = _flag(kwargs, "enable_thinking")
    if thinking is not None and enable is not None and thinking != enable:
        raise OptionError(
            "chat_template_kwargs.thinking and chat_template_kwargs.enable_thinking disagree; "
            "send one of them",
            "chat_template_kwargs",
        )
    explicit = thinking if thinking is not None else enable
    value, where = kwargs.get("reasoning_effort"), "chat_template_kwargs.reasoning_effort"
    if value is None:
        value, where = reasoning_effort, "reasoning_effort"
    if value is not None and not isinstance(value, str):
        raise OptionError(f"reasoning_effort must be a string, not {value!r}", where)
    level = None
    if value == "none":
        if explicit:
            raise OptionError(
                "reasoning_effort 'none' turns thinking off, but chat_template_kwargs asks for "
                "thinking; drop one of them",
                where,
            )
        explicit = False
    elif value is not None:
        effort.check_profile(effort_profile)
        try:
            level = effort.to_level(value, effort_profile)
        except ValueError as exc:
            raise OptionError(str(exc), where) from None
    drop = _flag(kwargs, "drop_thinking")
    return EncodeOptions(
        thinking=explicit if explicit is not None else level is not None,
        reasoning_effort=level,
        drop_thinking=True if drop is None else drop,
        response_format=response_schema,
        effort_profile=effort_profile,
    )
