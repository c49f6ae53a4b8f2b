"""DeepSeek-V4's MTP layer (`engine.spec_decode.mtp_v4.V4MtpLayer`) in the shape of a causal LM,
so that `engine.model_runner.ModelRunner` runs it as the drafting model of `method: mtp`
(`engine.spec_decode.model_proposer`)."""

from __future__ import annotations

import torch
from torch import nn
from transformers.modeling_outputs import BaseModelOutput

from engine.spec_decode.mtp_v4 import V4MtpLayer


class V4MtpDecoder(nn.Module):
    """The MTP layer as a decoder `engine.model_runner.ModelRunner` can run:
    `forward(input_ids [1, T], position_ids [1, T], previous_hidden_states [T, n * D])` ->
    `last_hidden_state` `[1, T, n * D]`, the output streams (chained into the next draft step)."""

    def __init__(self, mtp: V4MtpLayer) -> None:
        super().__init__()
        self.mtp = mtp

    def forward(
        self,
        input_ids: torch.Tensor,
        position_ids: torch.Tensor,
        previous_hidden_states: torch.Tensor,
        use_cache: bool = False,
    ) -> BaseModelOutput:
        return BaseModelOutput(
            last_hidden_state=self.mtp(input_ids, previous_hidden_states, position_ids)
        )


class V4MtpHead(nn.Module):
    """`[R, n * D]` output streams -> `[R, vocab]` logits: the MTP layer's `hc_head` and `norm`,
    then the target's LM head."""

    def __init__(self, mtp: V4MtpLayer, lm_head: nn.Module) -> None:
        super().__init__()
        self.mtp = mtp
        self.lm_head = lm_head

    def forward(self, streams: torch.Tensor) -> torch.Tensor:
        return self.lm_head(self.mtp.final_hidden(streams))


class V4MtpDraftModel(nn.Module):
    """`V4MtpDecoder` and `V4MtpHead` in the shape of a causal LM for `ModelRunner`, plus the
    target's hidden streams of its latest forward pass (`conditioning`).

    The engine hands a proposer the target's final hidden states (after `hc_head` and the
    final norm); the MTP layer takes the streams before `hc_head`, which a forward pre-hook on
    the target's `hc_head` keeps until `conditioning` takes them.

    Args:
        mtp: the loaded layer (`load_v4_mtp`, attached to the target as `target.mtp`).
        target: the target model (its decoder's `hc_head` and its LM head).
    """

    def __init__(self, mtp: V4MtpLayer, target: nn.Module) -> None:
        super().__init__()
        self.decoder = V4MtpDecoder(mtp)
        self.head = V4MtpHead(mtp, target.get_output_embeddings())
        self._streams: torch.Tensor | None = None
        self._hook = target.get_decoder().hc_head.register_forward_pre_hook(self._keep)

    def _keep(self, module: nn.Module, args: tuple[torch.Tensor, ...]) -> None:
        self._streams = args[0]

    def conditioning(self, hidden: torch.Tensor) -> torch.Tensor:
        """The target's hidden streams `[T, n * D]` of the forward pass that gave `hidden`
        (`[T, D]`, its final hidden states); taken once.

        Raises:
            RuntimeError: no forward pass of `T` tokens ran since the last call.
        """
        streams, self._streams = self._streams, None
        if streams is None or streams.shape[:2] != (1, hidden.shape[0]):
            raise RuntimeError(
                "the MTP layer needs the target's hidden streams of the step just run; got "
                f"{None if streams is None else tuple(streams.shape)} for {hidden.shape[0]} tokens"
            )
        return streams[0].flatten(1)

    def get_decoder(self) -> nn.Module:
        """The layer as a decoder."""
        return self.decoder

    def get_output_embeddings(self) -> nn.Module:
        """`hc_head`, `norm` and the target's LM head."""
        return self.head
