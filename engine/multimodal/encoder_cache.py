"""Encoder outputs kept so that one image or clip is encoded once.

Two tiers, both keyed by the item's `content_hash`:
- per request, while its prefill runs: an item repeated in one prompt, or met again after a
  preemption, is not encoded again; a request's entries go when its prefill completes
  (`finish_prefill`). The runner never hears of aborts, so at most `max_requests` requests keep
  entries: the one scheduled least recently loses its own first (it only costs a recompute).
- across requests (`EngineConfig.encoder_cache_items`): the most recently used `shared_items`
  outputs, least recently used evicted first (vLLM's encoder cache keys on the media hash too,
  `vllm/v1/core/encoder_cache_manager.py`).
"""

from __future__ import annotations

from collections import OrderedDict

import torch


class EncoderCache:
    """Encoder outputs by content hash, per request and shared.

    Args:
        shared_items: outputs kept across requests (0: none).
        max_requests: requests whose prefill-time entries are kept at once.
    """

    def __init__(self, shared_items: int, max_requests: int) -> None:
        assert max_requests > 0, "max_requests must be positive"
        self.shared_items = shared_items
        self.max_requests = max_requests
        self._shared: OrderedDict[bytes, torch.Tensor] = OrderedDict()
        self._requests: OrderedDict[str, dict[bytes, torch.Tensor]] = OrderedDict()

    def get(self, request_id: str, content_hash: bytes) -> torch.Tensor | None:
        """The item's encoder output `[length, hidden]` if kept (for this request or shared)."""
        own = self._requests.get(request_id)
        if own is not None and content_hash in own:
            return own[content_hash]
        hit = self._shared.get(content_hash)
        if hit is not None:
            self._shared.move_to_end(content_hash)
        return hit

    def put(self, request_id: str, content_hash: bytes, output: torch.Tensor) -> None:
        """Keep `output` for the request's prefill and, if the shared tier is on, across
        requests."""
        own = self._requests.setdefault(request_id, {})
        self._requests.move_to_end(request_id)
        own[content_hash] = output
        while len(self._requests) > self.max_requests:
            self._requests.popitem(last=False)
        if self.shared_items:
            self._shared[content_hash] = output
            self._shared.move_to_end(content_hash)
            while len(self._shared) > self.shared_items:
                self._shared.popitem(last=False)

    def finish_prefill(self, request_id: str) -> None:
        """Drop the request's own entries (its prompt is in the KV cache now)."""
        self._requests.pop(request_id, None)

    def __len__(self) -> int:
        """Distinct outputs held, both tiers."""
        held = {h for own in self._requests.values() for h in own} | set(self._shared)
        return len(held)
