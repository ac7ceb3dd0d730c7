"""Any other OpenAI-compatible server: ``GET /v1/models`` lists models. Estimated
layouts; reuse where ``usage.prompt_tokens_details.cached_tokens`` says it; the window
``SAKUR4_BACKEND_WINDOW`` names. Asked last."""

from __future__ import annotations

from sakur4.backends.kinds.base import (
    ESTIMATED,
    Asked,
    Identity,
    ServerKind,
    estimated_layouts,
    first_model,
    openai_api_opener,
    unreported_window,
)
from sakur4.backends.openai_compat import OpenAICompatClient
from sakur4.backends.seam import Backend, Layouts


async def _identify(ask: Asked) -> Identity | None:
    first = first_model(await ask.get("/v1/models"))
    return Identity("openai-compatible", model=str(first.get("id"))) if first else None


open_generic = openai_api_opener(OpenAICompatClient)


def generic_layouts(client: Backend) -> Layouts | None:
    return estimated_layouts(client)


KIND = ServerKind(
    "openai-compatible",
    order=1000,
    identify=_identify,
    open=open_generic,
    layouts=generic_layouts,
    layout=ESTIMATED,
    window_advice=unreported_window,
)
