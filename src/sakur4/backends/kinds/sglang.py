"""SGLang: ``GET /get_model_info`` has ``model_path`` and ``is_generation`` (context:
``context_length`` of ``/get_server_info``, ``/server_info`` in newer releases);
message contents counted by its tokenizer, the template estimated."""

from __future__ import annotations

from collections.abc import Mapping

from sakur4.backends.estimate import MARGIN
from sakur4.backends.kinds.base import (
    Asked,
    Identity,
    Opening,
    ServerKind,
    as_int,
    estimated_layouts,
    unreported_window,
)
from sakur4.backends.seam import Backend, Layouts
from sakur4.backends.sglang import SglangClient


async def _identify(ask: Asked) -> Identity | None:
    info = await ask.get("/get_model_info")
    if not (isinstance(info, Mapping) and "model_path" in info and "is_generation" in info):
        return None
    server = await ask.get("/get_server_info")
    if not isinstance(server, Mapping):
        server = await ask.get("/server_info")
    server = server if isinstance(server, Mapping) else {}
    return Identity(
        "sglang",
        version=str(server["version"]) if "version" in server else None,
        model=str(info["model_path"]),
        n_ctx=as_int(server.get("context_length")),
    )


def _open(o: Opening) -> Backend:
    s = o.settings
    return SglangClient(
        o.url,
        timeout=s.backend_timeout,
        window=s.backend_window,
        model=o.model,
        cache_report=o.cache_report,
        transport=o.transport,
        through=o.through,
    )


def _layouts(client: Backend) -> Layouts | None:
    if not isinstance(client, SglangClient):
        return None
    return estimated_layouts(client, client.count_contents)


def _agents_advice(agents: int, window: int | None) -> tuple[str, ...]:
    need = f"{agents} × {window:,} = {agents * window:,} tokens" if window else f"{agents} windows"
    return (
        f"for {agents} agents: SGLang's radix cache is shared by every request (no flag per "
        f"agent), so its token pool must hold every agent's prompt, {need}: its log says "
        "`max_total_num_tokens`; if that is less, raise `--mem-fraction-static`",
    )


KIND = ServerKind(
    "sglang",
    order=30,
    identify=_identify,
    open=_open,
    layouts=_layouts,
    layout="message contents exact (/v1/tokenize), template estimated; calibrated on "
    f"usage.prompt_tokens, +{MARGIN:.0%} margin",
    reuse_flag="start SGLang with `--enable-cache-report` so usage carries cached_tokens "
    "(without it prompt_tokens_details is null: not reported, not 0)",
    window_advice=unreported_window,
    agents_advice=_agents_advice,
)
