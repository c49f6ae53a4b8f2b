"""The routing policy as a pure function: request features + model states → ordered candidates.

No Ray and no HTTP here: the router's ingress extracts features (`extract_features`), collects
`ModelState`s, calls `decide` and maps the errors to OpenAI error responses.
"""

from __future__ import annotations

from router.policy.capabilities import Rejection, check_capabilities
from router.policy.decide import Decision, decide
from router.policy.errors import (
    NoHealthyModel,
    NoModelCanServe,
    PolicyError,
    UnknownModel,
)
from router.policy.features import (
    PRIORITY_HEADER,
    TENANT_HEADER,
    ModelState,
    RequestFeatures,
    extract_features,
)
from router.policy.prompt_tokens import estimate_prompt_tokens

__all__ = [
    "PRIORITY_HEADER",
    "TENANT_HEADER",
    "Decision",
    "ModelState",
    "NoHealthyModel",
    "NoModelCanServe",
    "PolicyError",
    "Rejection",
    "RequestFeatures",
    "UnknownModel",
    "check_capabilities",
    "decide",
    "estimate_prompt_tokens",
    "extract_features",
]
