"""LM Studio (0.4+): ``GET /api/v1/models`` lists ``models`` with ``loaded_instances``
(context: the loaded instance's ``config.context_length``); no tokenize endpoint
(estimated layouts); it reuses its cache but never reports it."""

from __future__ import annotations

from collections.abc import Mapping

from sakur4.backends.kinds.base import (
    ESTIMATED,
    Asked,
    Identity,
    ServerKind,
    as_int,
    estimated_layouts,
    openai_api_opener,
)
from sakur4.backends.lmstudio import LmStudioClient
from sakur4.backends.seam import Backend, Layouts


async def _identify(ask: Asked) -> Identity | None:
    lmstudio = await ask.get("/api/v1/models")
    listed = lmstudio.get("models") if isinstance(lmstudio, Mapping) else None
    if not (
        isinstance(listed, list)
        and listed
        and all(isinstance(m, Mapping) and "loaded_instances" in m for m in listed)
    ):
        return None
    loaded = [m for m in listed if m.get("loaded_instances")]
    card = (loaded or listed or [{}])[0]
    instance = (card.get("loaded_instances") or [{}])[0]
    config = instance.get("config") if isinstance(instance, Mapping) else None
    return Identity(
        "lmstudio",
        model=str(card["key"]) if "key" in card else None,
        n_ctx=as_int(config.get("context_length")) if isinstance(config, Mapping) else None,
        n_ctx_train=as_int(card.get("max_context_length")),
    )


def _layouts(client: Backend) -> Layouts | None:
    return estimated_layouts(client) if isinstance(client, LmStudioClient) else None


def _window_advice(n_ctx: int | None) -> tuple[str, ...]:
    if n_ctx is not None:
        return ()
    return (
        "no model is loaded: load it with `lms load MODEL --context-length N` (or set "
        "SAKUR4_BACKEND_WINDOW)",
    )


def _agents_advice(agents: int, window: int | None) -> tuple[str, ...]:
    return (
        f"for {agents} agents: load the model with Max Concurrent Predictions {agents} or more "
        "(model loader, advanced settings; its llama.cpp engine, runtime v2.0.0 or later): "
        "with fewer the agents queue for one slot and each switch re-processes the whole "
        "prompt",
    )


KIND = ServerKind(
    "lmstudio",
    order=50,
    identify=_identify,
    open=openai_api_opener(LmStudioClient),
    layouts=_layouts,
    layout=ESTIMATED + " (LM Studio has no tokenize endpoint)",
    reuse_flag="LM Studio reuses its cache but never reports it (lmstudio-bug-tracker "
    "#778, #2419): nothing to switch on",
    window_advice=_window_advice,
    agents_advice=_agents_advice,
)
