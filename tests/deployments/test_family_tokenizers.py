"""The rebuilt Qwen and DeepSeek-V3 tokenizers: round trips, special-token ids, chat templates.

Expected ids are the real checkpoints' (Qwen2.5/Qwen3 and DeepSeek-V3/R1 tokenizer files), not
read from the module under test.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from transformers import AutoTokenizer

from deployments.chat_template import ChatTemplate
from deployments.family_tokenizers import save_family_tokenizer
from deployments.protocol.requests import ChatMessage
from deployments.tool_history import normalize_history
from deployments.toolcalls.assemble import assemble, parse_text
from deployments.toolcalls.registry import DEFAULT_PARSER_BY_FAMILY, get_parser

FAMILIES = ("qwen2", "deepseek_v3")

SPECIAL_IDS: dict[str, dict[str, int]] = {
    "qwen2": {
        "<|endoftext|>": 151643,
        "<|im_start|>": 151644,
        "<|im_end|>": 151645,
        "<|object_ref_start|>": 151646,
        "<|video_pad|>": 151656,
        "<tool_call>": 151657,
        "</tool_call>": 151658,
        "<|fim_prefix|>": 151659,
        "<|file_sep|>": 151664,
        "<tool_response>": 151665,
        "</tool_response>": 151666,
        "<think>": 151667,
        "</think>": 151668,
    },
    "deepseek_v3": {
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
    },
}
TOOL_TAGS = {"qwen2": ["<tool_call>", "</think>"], "deepseek_v3": ["<｜tool▁sep｜>", "</think>"]}
END_OF_TURN = {"qwen2": "<|im_end|>", "deepseek_v3": "<｜end▁of▁sentence｜>"}

TEXTS = [
    "你好，世界！今天北京的天气怎么样？我想去颐和园散步。",
    'def area(r: float) -> float:\n    """圆的面积"""\n    return 3.14159 * r ** 2\n\n\tx = [1, 22, 333]',
    "Emoji 🤖🎉 family 👨‍👩‍👧 flags 🇫🇷🇯🇵 and a café ☕ — done.",
]
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    },
}
HISTORY = [
    {"role": "user", "content": "Weather in Paris and 東京?"},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "c1",
                "type": "function",
                "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
            },
            {
                "id": "c2",
                "type": "function",
                "function": {"name": "get_weather", "arguments": '{"city": "東京"}'},
            },
        ],
    },
    {"role": "tool", "tool_call_id": "c1", "content": '{"temp_c": 18}'},
    {"role": "tool", "tool_call_id": "c2", "content": '{"temp_c": 25}'},
]


@pytest.fixture(scope="module")
def tokenizers(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Each family's tokenizer, saved and loaded back as a checkpoint's tokenizer would be."""
    out = {}
    for family in FAMILIES:
        path = save_family_tokenizer(family, tmp_path_factory.mktemp(family))
        out[family] = AutoTokenizer.from_pretrained(path)
    return out


@pytest.mark.parametrize("text", TEXTS, ids=["chinese", "code", "emoji"])
@pytest.mark.parametrize("family", FAMILIES)
def test_round_trip(tokenizers: dict[str, Any], family: str, text: str) -> None:
    tok = tokenizers[family]
    ids = tok.encode(text, add_special_tokens=False)
    assert tok.decode(ids) == text
    assert len(ids) < len(text.encode()), "merges apply (not byte by byte)"


@pytest.mark.parametrize("family", FAMILIES)
def test_special_tokens_are_single_tokens_with_real_ids(
    tokenizers: dict[str, Any], family: str
) -> None:
    tok = tokenizers[family]
    for token, token_id in SPECIAL_IDS[family].items():
        assert tok.encode(token, add_special_tokens=False) == [token_id], token
        assert tok.encode(f"a{token}b", add_special_tokens=False).count(token_id) == 1, token
        assert tok.convert_ids_to_tokens(token_id) == token
    eot = SPECIAL_IDS[family][END_OF_TURN[family]]
    ids = tok.encode("x" + "".join(TOOL_TAGS[family]), add_special_tokens=False) + [eot]
    assert tok.decode(ids, skip_special_tokens=True) == "x" + "".join(TOOL_TAGS[family]), (
        "tool and reasoning tags survive skip_special_tokens (the parsers need them)"
    )


@pytest.mark.parametrize("family", FAMILIES)
def test_template_renders_tools_and_tool_history(tokenizers: dict[str, Any], family: str) -> None:
    template = ChatTemplate(tokenizers[family])
    assert template.native_tools
    history = normalize_history([ChatMessage.model_validate(m) for m in HISTORY])
    text = template.render(history, [WEATHER])
    assert "get_weather" in text and "Get the current weather in a city" in text
    assert text.count('{"city": "Paris"}') == 1 and text.count('{"city": "東京"}') == 1
    assert '{"temp_c": 18}' in text and '{"temp_c": 25}' in text
    assert text.index("Paris") < text.index('{"temp_c": 18}') < text.index('{"temp_c": 25}')
    bare = template.render(history[:1], None)
    assert "get_weather" not in bare


@pytest.mark.parametrize("family", FAMILIES)
def test_rendered_tool_calls_parse_back(tokenizers: dict[str, Any], family: str) -> None:
    """The calls a template writes into history are what the family's parser reads."""
    tok = tokenizers[family]
    history = normalize_history([ChatMessage.model_validate(m) for m in HISTORY[:2]])
    prompt = tok.apply_chat_template(
        history[:1], tools=[WEATHER], tokenize=False, add_generation_prompt=True
    )
    full = tok.apply_chat_template(history, tools=[WEATHER], tokenize=False)
    assert full.startswith(prompt)
    emitted = full[len(prompt) :].split(END_OF_TURN[family])[0]
    parser = get_parser(DEFAULT_PARSER_BY_FAMILY[family], [WEATHER])
    message = assemble(parse_text(parser, emitted))
    calls = [
        (c["function"]["name"], json.loads(c["function"]["arguments"]))
        for c in message["tool_calls"]
    ]
    assert calls == [("get_weather", {"city": "Paris"}), ("get_weather", {"city": "東京"})]
    assert not (message["content"] or "").strip()


def test_unknown_family_names_the_choices(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="phi3.*deepseek_v3"):
        save_family_tokenizer("phi3", tmp_path)
