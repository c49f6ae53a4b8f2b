"""Messages between a replica and its engine core process (`engine.core_process`).

Each message is one pickled object (plain pickle: tensors travel by value, no file descriptors
are shared) written with `multiprocessing.connection`'s length-prefixed framing. A large text
that many messages carry (xgrammar's tokenizer info, ~1.6 MB for SmolLM2, in every constrained
request) is wrapped in `SharedText`: a `Sender` writes it once per connection and afterwards
only its digest, which the receiving process resolves from what it has already read.
"""

from __future__ import annotations

import hashlib
import io
import pickle
from multiprocessing.connection import Connection
from typing import Any


class SharedText:
    """An immutable text sent by value once per connection, then by its SHA-256 digest.

    Args:
        text: the text.
        digest: its SHA-256 hex digest (computed if not given).
    """

    def __init__(self, text: str, digest: str | None = None) -> None:
        self.text = text
        self.digest = digest or hashlib.sha256(text.encode()).hexdigest()

    def __reduce__(self) -> tuple[Any, ...]:
        return (_received, (self.text, self.digest))


_RECEIVED: dict[str, SharedText] = {}  # digest -> text, in a receiving process


def _received(text: str, digest: str) -> SharedText:
    """Unpickle a `SharedText` sent by value, and keep it for the digests that follow."""
    shared = SharedText(text, digest)
    _RECEIVED[digest] = shared
    return shared


class _Pickler(pickle.Pickler):
    def __init__(self, file: io.BytesIO, sent: set[str], new: set[str]) -> None:
        super().__init__(file, protocol=pickle.HIGHEST_PROTOCOL)
        self._sent = sent
        self._new = new

    def persistent_id(self, obj: Any) -> str | None:
        if isinstance(obj, SharedText):
            if obj.digest in self._sent:
                return obj.digest
            self._new.add(obj.digest)
        return None


class _Unpickler(pickle.Unpickler):
    def persistent_load(self, pid: Any) -> SharedText:
        try:
            return _RECEIVED[pid]
        except KeyError:
            raise pickle.UnpicklingError(f"shared text {pid} was never received") from None


class Sender:
    """Pickles the messages of one connection, each `SharedText` by value the first time only.

    Messages must be written in the order `dumps` made them (one writer, FIFO).
    """

    def __init__(self) -> None:
        self._sent: set[str] = set()

    def dumps(self, obj: Any) -> bytes:
        """`obj` pickled for this connection.

        Raises:
            pickle.PicklingError, TypeError, AttributeError: `obj` does not pickle.
        """
        buf = io.BytesIO()
        new: set[str] = set()
        _Pickler(buf, self._sent, new).dump(obj)
        self._sent |= new  # only once the whole message pickled
        return buf.getvalue()


def loads(data: bytes) -> Any:
    """Unpickle one message (`Sender.dumps`).

    Raises:
        pickle.UnpicklingError: a `SharedText` digest this process has not read by value.
        Exception: whatever the pickled objects raise while rebuilt.
    """
    return _Unpickler(io.BytesIO(data)).load()


def recv(conn: Connection) -> Any:
    """Read and unpickle one message.

    Raises:
        EOFError, OSError: the connection is closed or broken.
    """
    return loads(conn.recv_bytes())
