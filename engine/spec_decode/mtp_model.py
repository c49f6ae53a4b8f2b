"""DeepSeek-V3's multi-token-prediction (MTP) layer, loaded as the draft model of `method: mtp`.

The layer and its loading are transformers' (`transformers.modeling_layers.MtpModel`, the
module its `MTPCandidateGenerator` drafts with): per DeepSeek-V3 technical report (arXiv
2412.19437, section 2.2), at position j the layer takes the target's final hidden state `h_j`
(after the final norm, as transformers feeds it) and the embedding of the next token
`t_{j+1}`, computes `eh_proj([enorm(emb(t_{j+1})); hnorm(h_j)])`, runs one decoder block
(MLA attention and MoE, with its own KV cache), normalises (`shared_head.norm`) and predicts
`t_{j+2}` through the target's LM head; embedding and head are the target's. The checkpoint
holds the layer as `model.layers.{num_hidden_layers}.*` (`num_nextn_predict_layers` of them).

transformers finds these tensors with the key patterns the model class ignores when it loads
(`_keys_to_ignore_on_load_unexpected`), for DeepSeek-V3 those of its 671B checkpoint
(`model.layers.61`); `load_mtp` sets them on the loaded model to the layers after its last
decoder layer, so DeepSeek-V3-architecture checkpoints of any depth load.
"""

from __future__ import annotations

import torch
from torch import nn
from transformers import PreTrainedModel
from transformers.modeling_layers import MtpModel
from transformers.modeling_outputs import BaseModelOutput


def num_mtp_layers(config: object) -> int:
    """MTP layers a checkpoint's config declares (`num_nextn_predict_layers`; 0: none)."""
    return int(getattr(config, "num_nextn_predict_layers", 0) or 0)


def load_mtp(main_model: PreTrainedModel) -> MtpModel:
    """The checkpoint's MTP layers, built for and sharing embedding and head with `main_model`.

    Call it on the model as transformers loaded it (before our fused layers replace its
    modules: the MTP block is built from the class of the model's last decoder layer).

    Raises:
        ValueError: the config declares no MTP layer, or the checkpoint lacks its tensors.
    """
    text = main_model.config.get_text_config()
    if num_mtp_layers(text) < 1:
        raise ValueError(
            f"{main_model.config.name_or_path}: the checkpoint has no multi-token-prediction "
            "layer (num_nextn_predict_layers is 0); speculative method 'mtp' needs one"
        )
    first = text.num_hidden_layers
    main_model._keys_to_ignore_on_load_unexpected = [
        rf"model\.layers\.{first + i}\..*" for i in range(num_mtp_layers(text))
    ]
    try:
        mtp = MtpModel.from_pretrained(main_model)
    except (OSError, RuntimeError, KeyError) as exc:  # transformers raises on a missing tensor
        first = str(exc).splitlines()[0][:300] if str(exc) else type(exc).__name__
        raise ValueError(
            f"{main_model.config.name_or_path}: cannot load the MTP layer: {first}"
        ) from exc
    return mtp.eval()


class MtpDecoder(nn.Module):
    """The first MTP layer as a decoder `engine.model_runner.ModelRunner` can run.

    `forward(input_ids [1, T], position_ids [1, T], previous_hidden_states [T, H])`: row j
    holds the token `t_{p+1}` and the target's hidden state `h_p` of position p; returns the
    layer's output (after `shared_head.norm`) as `last_hidden_state` `[1, T, H]`. A later
    draft step feeds the layer's own output as `previous_hidden_states` (vLLM and transformers
    chain the first layer alike when k exceeds the layers).
    """

    def __init__(self, mtp: MtpModel) -> None:
        super().__init__()
        self.mtp = mtp

    def forward(
        self,
        input_ids: torch.Tensor,
        position_ids: torch.Tensor,
        previous_hidden_states: torch.Tensor,
        use_cache: bool = False,
    ) -> BaseModelOutput:
        hidden = self.mtp.forward_layer(
            0,
            last_hidden_states=previous_hidden_states[None],
            position_ids=position_ids,
            mtp_cache=None,
            input_ids=input_ids,
        )
        return BaseModelOutput(last_hidden_state=hidden)


class MtpDraftModel(nn.Module):
    """`MtpDecoder` plus the target's LM head, in the shape of a causal LM for `ModelRunner`.

    Args:
        mtp: the loaded MTP layers (`load_mtp`), after our fused layers replaced its modules.
    """

    def __init__(self, mtp: MtpModel) -> None:
        super().__init__()
        self.decoder = MtpDecoder(mtp)
        self.head = mtp.shared_head

    def get_decoder(self) -> nn.Module:
        """The layer as a decoder."""
        return self.decoder

    def get_output_embeddings(self) -> nn.Module:
        """The target's LM head."""
        return self.head
