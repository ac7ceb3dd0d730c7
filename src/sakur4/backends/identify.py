"""Which kind of inference server is behind a URL, from each one's documented endpoints.

Asked in order, first match wins (a 404 or an answer of the wrong shape just moves on):

- llama.cpp: ``GET /props`` has ``build_info`` (context: ``default_generation_settings``).
- a Sakur4 gateway: ``GET /sakur4/gateway`` names itself and the backend it fronts.
- vLLM: ``GET /v1/models`` cards say ``owned_by: "vllm"`` (context: ``max_model_len``);
  ``GET /version`` gives the version.
- SGLang: ``GET /get_model_info`` has ``model_path`` and ``is_generation`` (context:
  ``context_length`` of ``/get_server_info``, ``/server_info`` in newer releases).
- Ollama: ``GET /api/version`` gives ``{"version"}``; models from ``/api/tags``.
- LM Studio (0.4+): ``GET /api/v1/models`` lists ``models`` with ``loaded_instances``
  (context: the loaded instance's ``config.context_length``).
- TabbyAPI: ``GET /v1/model`` says ``owned_by: "tabbyAPI"`` (``parameters.max_seq_len``).
- any other OpenAI-compatible server: ``GET /v1/models`` lists models.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from sakur4.backends.http import HttpBackend
from sakur4.errors import BackendRefused, BackendUnavailable

BackendKind = Literal[
    "llama.cpp",
    "vllm",
    "sglang",
    "ollama",
    "lmstudio",
    "tabbyapi",
    "openai-compatible",
    "sakur4-gateway",
    "unknown",
]
# Where a Sakur4 gateway says what it is (it serves no /props of its own).
GATEWAY_IDENTITY = "/sakur4/gateway"

# Identification answers are small; a server that takes longer is not healthy.
IDENTIFY_TIME_LIMIT = 10.0


@dataclass(frozen=True, slots=True)
class Identity:
    """What kind of server answered, and what it says about itself."""

    kind: BackendKind
    version: str | None = None
    model: str | None = None
    n_ctx: int | None = None
    n_ctx_train: int | None = None
    total_slots: int | None = None
    # What the server shows of how it was started (llama.cpp: build, model, window,
    # slots, chat template): a stored probe is reused only for the same fingerprint.
    fingerprint: str | None = None
    # A Sakur4 gateway: the backend it is in front of.
    upstream: str | None = None


def fingerprint(props: Mapping[str, Any]) -> str:
    """A digest of what ``/props`` shows of a llama-server's start-up. Flags it does not
    show (``--swa-full``, ``-cms``, ``--cache-reuse``) are not in it."""
    gen = props.get("default_generation_settings")
    seen = [
        props.get("build_info"),
        props.get("model_path"),
        gen.get("n_ctx") if isinstance(gen, Mapping) else None,
        props.get("total_slots"),
        props.get("chat_template"),
    ]
    return hashlib.sha256(json.dumps(seen).encode()).hexdigest()[:16]


async def _get(http: HttpBackend, path: str, limit: float) -> Any:
    """The JSON at ``path``, or None when the server says it has no such endpoint."""
    try:
        return await http.get_json(path, time_limit=limit)
    except BackendRefused:
        return None  # 404/405/401…: not this kind (or not allowed to tell)
    except BackendUnavailable as e:
        if e.status is not None and e.status != 503:
            return None  # e.g. a 500 from an endpoint another kind of server lacks
        raise


def _int(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def _first_model(models: Any) -> Mapping[str, Any] | None:
    if isinstance(models, Mapping):
        data = models.get("data")
        if isinstance(data, list) and data and isinstance(data[0], Mapping):
            return data[0]
    return None


async def identify(http: HttpBackend, *, time_limit: float = IDENTIFY_TIME_LIMIT) -> Identity:
    """Identify the server behind ``http``; raises BackendUnavailable if it is down."""
    props = await _get(http, "/props", time_limit)
    if isinstance(props, Mapping) and "build_info" in props:
        gen = props.get("default_generation_settings")
        n_ctx = _int(gen.get("n_ctx")) if isinstance(gen, Mapping) else None
        models = await _get(http, "/v1/models", time_limit)
        meta = (_first_model(models) or {}).get("meta")
        meta = meta if isinstance(meta, Mapping) else {}
        return Identity(
            "llama.cpp",
            version=str(props["build_info"]),
            model=str(props.get("model_path") or props.get("model_alias") or "") or None,
            n_ctx=n_ctx if n_ctx is not None else _int(meta.get("n_ctx")),
            n_ctx_train=_int(meta.get("n_ctx_train")),
            total_slots=_int(props.get("total_slots")),
            fingerprint=fingerprint(props),
        )

    gateway = await _get(http, GATEWAY_IDENTITY, time_limit)
    if isinstance(gateway, Mapping) and "sakur4" in gateway:
        return Identity(
            "sakur4-gateway",
            version=str(gateway["sakur4"]),
            upstream=str(gateway.get("backend") or "") or None,
        )

    version = await _get(http, "/version", time_limit)
    models = await _get(http, "/v1/models", time_limit)
    first = _first_model(models)
    if first is not None and first.get("owned_by") == "vllm":
        return Identity(
            "vllm",
            version=str(version.get("version")) if isinstance(version, Mapping) else None,
            model=str(first.get("id")),
            n_ctx=_int(first.get("max_model_len")),
        )

    info = await _get(http, "/get_model_info", time_limit)
    if isinstance(info, Mapping) and "model_path" in info and "is_generation" in info:
        server = await _get(http, "/get_server_info", time_limit)
        if not isinstance(server, Mapping):
            server = await _get(http, "/server_info", time_limit)
        server = server if isinstance(server, Mapping) else {}
        return Identity(
            "sglang",
            version=str(server["version"]) if "version" in server else None,
            model=str(info["model_path"]),
            n_ctx=_int(server.get("context_length")),
        )

    ollama = await _get(http, "/api/version", time_limit)
    if isinstance(ollama, Mapping) and "version" in ollama:
        tags = await _get(http, "/api/tags", time_limit)
        listed = tags.get("models") if isinstance(tags, Mapping) else None
        name = listed[0].get("name") if isinstance(listed, list) and listed else None
        return Identity("ollama", version=str(ollama["version"]), model=name)

    lmstudio = await _get(http, "/api/v1/models", time_limit)
    listed = lmstudio.get("models") if isinstance(lmstudio, Mapping) else None
    if (
        isinstance(listed, list)
        and listed
        and all(isinstance(m, Mapping) and "loaded_instances" in m for m in listed)
    ):
        loaded = [m for m in listed if m.get("loaded_instances")]
        card = (loaded or listed or [{}])[0]
        instance = (card.get("loaded_instances") or [{}])[0]
        config = instance.get("config") if isinstance(instance, Mapping) else None
        return Identity(
            "lmstudio",
            model=str(card["key"]) if "key" in card else None,
            n_ctx=_int(config.get("context_length")) if isinstance(config, Mapping) else None,
            n_ctx_train=_int(card.get("max_context_length")),
        )

    tabby = await _get(http, "/v1/model", time_limit)
    if isinstance(tabby, Mapping) and tabby.get("owned_by") == "tabbyAPI":
        params = tabby.get("parameters")
        params = params if isinstance(params, Mapping) else {}
        return Identity(
            "tabbyapi", model=str(tabby.get("id")), n_ctx=_int(params.get("max_seq_len"))
        )

    if first is not None:
        return Identity("openai-compatible", model=str(first.get("id")))
    return Identity("unknown")
