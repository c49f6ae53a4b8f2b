"""`POST /tokenize` and `/detokenize` on one model: the prompt exactly as the engine would
prefill it (chat: `ChatHandler.render`, the same code path as a chat completion; prompt: the
completion endpoint's encoding), so `count` equals a completion's `usage.prompt_tokens`."""

from __future__ import annotations

from typing import Any

from deployments.handlers.chat import ChatHandler
from deployments.handlers.preparation import Preparer
from deployments.prompting.engine_inputs import check_token_ids, encode_text
from deployments.protocol.preprocess_plan import PreprocessPlan
from deployments.protocol.tokenize import (
    DetokenizeRequest,
    DetokenizeResponse,
    TokenizeChatRequest,
    TokenizeCompletionRequest,
    TokenizeResponse,
)


class TokenizeHandler:
    """Tokenizes and detokenizes for one model.

    Args:
        chat: the model's chat handler (its template, tokenizer and engine limits).
        preparer: runs the rendering off the event loop, bounded in time.
    """

    def __init__(self, chat: ChatHandler, preparer: Preparer) -> None:
        self.chat = chat
        self.tokenizer: Any = chat.tokenizer
        self.preparer = preparer

    async def tokenize(
        self,
        request: TokenizeChatRequest | TokenizeCompletionRequest,
        plan: PreprocessPlan | None = None,
    ) -> TokenizeResponse:
        """Token ids of a chat prompt (after the router's preprocessing `plan`) or of a text.

        Raises:
            OpenAIError: 400 as `ChatHandler.render` raises, or for text that is not Unicode.
        """
        if isinstance(request, TokenizeChatRequest):
            rendered = await self.preparer.run(lambda: self.chat.render(request, plan))
            text, ids = rendered.text, rendered.prompt
        else:
            text, special = request.prompt, request.add_special_tokens
            ids = await self.preparer.run(
                lambda: encode_text(self.tokenizer, text, "prompt", special)
            )
        strs = self.tokenizer.convert_ids_to_tokens(ids) if request.return_token_strs else None
        return TokenizeResponse(
            count=len(ids),
            max_model_len=self.chat.engine.max_model_len,
            tokens=ids,
            token_strs=strs,
            prompt=text if request.return_prompt else None,
        )

    def detokenize(self, request: DetokenizeRequest) -> DetokenizeResponse:
        """The text of `request.tokens`, special tokens kept.

        Raises:
            OpenAIError: 400 for an id outside the model's vocabulary.
        """
        check_token_ids(request.tokens, self.chat.engine.vocab_size, "tokens")
        return DetokenizeResponse(prompt=self.tokenizer.decode(request.tokens))
