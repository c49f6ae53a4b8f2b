"""Placing media items in a prompt: the chat template writes one placeholder token per media
part, in order; each is repeated to the item's length (as `Qwen2_5_VLProcessor` and
`Qwen2AudioProcessor` expand theirs), and the item records where its run starts."""

from __future__ import annotations

from deployments.media.processors import Processed
from deployments.protocol.errors import OpenAIError
from engine.multimodal.inputs import MediaItem, Modality


def expand(
    ids: list[int], media: list[Processed], pads: dict[int, Modality]
) -> tuple[list[int], tuple[MediaItem, ...]]:
    """Expand each placeholder of `ids` to its media item's tokens.

    Args:
        ids: the rendered prompt's token ids, one placeholder per media part.
        media: the parts the prompt holds, in prompt order.
        pads: placeholder token id -> its modality (`<|image_pad|>` -> image, ...).

    Returns:
        The expanded ids, and one `MediaItem` per part with its `offset` and `length` in them.

    Raises:
        OpenAIError: 400 when the placeholders do not match the parts one for one (the text
            of a message spells a placeholder token itself).
    """
    out: list[int] = []
    items: list[MediaItem] = []
    for token in ids:
        modality = pads.get(token)
        if modality is None:
            out.append(token)
            continue
        k = len(items)
        if k == len(media) or media[k].modality != modality:
            raise _mismatch(modality)
        part = media[k]
        items.append(MediaItem(modality, len(out), part.length, part.data, part.content_hash))
        out.extend([token] * part.length)
    if len(items) != len(media):
        raise _mismatch(media[len(items)].modality)
    return out, tuple(items)


def _mismatch(modality: Modality) -> OpenAIError:
    return OpenAIError(
        f"the prompt's {modality} placeholder tokens do not match its {modality} parts one for "
        "one: message text may not contain the model's own placeholder tokens",
        param="messages",
    )
