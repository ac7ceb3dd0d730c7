"""Ollama: ``GET /api/version`` gives ``{"version"}``, models from ``/api/tags``; no
tokenize endpoint (estimated layouts); its window is ``num_ctx``."""

from __future__ import annotations

from collections.abc import Mapping

from sakur4.backends.kinds.base import (
    ESTIMATED,
    Asked,
    Identity,
    ServerKind,
    estimated_layouts,
    openai_api_opener,
)
from sakur4.backends.ollama import OllamaClient
from sakur4.backends.seam import Backend, Layouts


async def _identify(ask: Asked) -> Identity | None:
    ollama = await ask.get("/api/version")
    if not (isinstance(ollama, Mapping) and "version" in ollama):
        return None
    tags = await ask.get("/api/tags")
    listed = tags.get("models") if isinstance(tags, Mapping) else None
    name = listed[0].get("name") if isinstance(listed, list) and listed else None
    return Identity("ollama", version=str(ollama["version"]), model=name)


def _layouts(client: Backend) -> Layouts | None:
    return estimated_layouts(client) if isinstance(client, OllamaClient) else None


def _window_advice(n_ctx: int | None) -> tuple[str, ...]:
    if n_ctx is not None and n_ctx > 8192:
        return ()
    return (
        f"Ollama's window is num_ctx ({n_ctx or 'not known until the model loads'}; "
        "under 24 GiB of VRAM it defaults to 4k, and a longer prompt is cut silently): "
        "start it with `OLLAMA_CONTEXT_LENGTH=32768 ollama serve` or set "
        "`PARAMETER num_ctx 32768` in a Modelfile",
    )


def _agents_advice(agents: int, window: int | None) -> tuple[str, ...]:
    ctx = f" OLLAMA_CONTEXT_LENGTH={window}" if window else ""
    return (
        f"for {agents} agents: start Ollama with `OLLAMA_NUM_PARALLEL={agents}{ctx} ollama "
        "serve`: a slot of the window for each agent (its runner is given num_ctx × "
        f"{agents} of KV cache); with fewer slots the agents take turns on one and each "
        "switch re-processes the whole prompt (ollama #18264)",
    )


KIND = ServerKind(
    "ollama",
    order=40,
    identify=_identify,
    open=openai_api_opener(OllamaClient),
    layouts=_layouts,
    layout=ESTIMATED + " (Ollama has no tokenize endpoint)",
    reuse_flag="Ollama reports cached tokens (prompt_eval_cached_count, mapped to "
    "cached_tokens) from the release with ollama PR #17943: upgrade",
    window_advice=_window_advice,
    agents_advice=_agents_advice,
)
