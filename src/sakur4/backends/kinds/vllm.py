"""vLLM: ``GET /v1/models`` cards say ``owned_by: "vllm"`` (context: ``max_model_len``),
``GET /version`` the version; exact layouts (``/tokenize`` with messages); automatic
prefix caching resumes any prefix in whole 128-token blocks, on a sliding-window model
only where those layers kept theirs (the probe measures it: vllm_experiment.py)."""

from __future__ import annotations

from collections.abc import Mapping

from sakur4.backends.kinds.base import Asked, Identity, Opening, ServerKind, as_int, first_model
from sakur4.backends.seam import Backend, Layouts
from sakur4.backends.vllm import BLOCK_TOKENS, VllmClient
from sakur4.backends.vllm_layout import VllmLayouts


async def _identify(ask: Asked) -> Identity | None:
    version = await ask.get("/version")
    first = first_model(await ask.get("/v1/models"))
    if first is None or first.get("owned_by") != "vllm":
        return None
    return Identity(
        "vllm",
        version=str(version.get("version")) if isinstance(version, Mapping) else None,
        model=str(first.get("id")),
        n_ctx=as_int(first.get("max_model_len")),
    )


def _open(o: Opening) -> Backend:
    return VllmClient(
        o.url,
        timeout=o.settings.backend_timeout,
        model=o.model,
        transport=o.transport,
        through=o.through,
    )


def _layouts(client: Backend) -> Layouts | None:
    return VllmLayouts(client) if isinstance(client, VllmClient) else None


def _agents_advice(agents: int, window: int | None) -> tuple[str, ...]:
    need = f"{agents} × {window:,} = {agents * window:,} tokens" if window else f"{agents} windows"
    return (
        f"for {agents} agents: vLLM runs many sequences at once and shares one prefix cache "
        "among them (no flag per agent), so its KV pool must hold every agent's prompt, "
        f"{need}: its start-up log says `GPU KV cache size: N tokens`; if that is less, "
        "raise `--gpu-memory-utilization` or lower `--max-model-len`, else the pool "
        "drops the blocks of the agent that waited longest",
    )


KIND = ServerKind(
    "vllm",
    order=20,
    identify=_identify,
    open=_open,
    layouts=_layouts,
    layout="exact: /tokenize with messages (the server's own template)",
    probing="blocks",
    prefix_block=BLOCK_TOKENS,
    reuse_flag="start vLLM with `--enable-prompt-tokens-details` (and keep "
    "`--enable-prefix-caching`) so usage carries cached_tokens",
    messages_route=True,
    agents_advice=_agents_advice,
)
