"""The engine core wire (`engine.wire`): a shared text travels by value once per connection,
then by digest; a digest the receiver never read is an error, not a wrong value."""

from __future__ import annotations

import pickle

import pytest

from engine import wire
from engine.wire import Sender, SharedText, loads


def test_a_shared_text_is_sent_once_then_by_digest() -> None:
    text = SharedText("x" * 100_000)
    sender = Sender()
    first = sender.dumps(("add", "r1", text))
    second = sender.dumps(("add", "r2", text))
    assert len(first) > 100_000 and len(second) < 200
    got_first, got_second = loads(first), loads(second)
    assert got_first[2].text == text.text and got_second[2].text == text.text
    assert got_second[2].digest == text.digest


def test_a_message_that_fails_to_pickle_does_not_count_its_texts_as_sent() -> None:
    text = SharedText("y" * 1000)
    sender = Sender()
    with pytest.raises((pickle.PicklingError, TypeError, AttributeError)):
        sender.dumps((text, lambda: None))
    assert loads(sender.dumps(text)).text == text.text
    assert len(sender.dumps(text)) < 200


def test_an_unknown_digest_is_an_unpickling_error() -> None:
    other = Sender()
    text = SharedText("never sent by value here " * 10)
    other.dumps(text)  # `other` now sends it by digest only
    by_digest = other.dumps(text)
    wire._RECEIVED.pop(text.digest, None)  # as in a process that never read it
    with pytest.raises(pickle.UnpicklingError, match="never received"):
        loads(by_digest)
