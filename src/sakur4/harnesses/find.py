"""Finding the servers a wrapped run needs: a Sakur4 gateway already on the port, and the
inference server behind it (``--backend``, ``SAKUR4_BACKEND``, or a local one on the
usual ports: llama.cpp moves its default from 8080 to 9931, so no single port is
assumed)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import httpx

from sakur4.backends.http import HttpBackend, normalize_url
from sakur4.backends.identify import Identity, identify
from sakur4.errors import BackendError, BackendUnavailable, SettingsError

# Loopback ports a local inference server listens on by default: llama.cpp (8080, and
# 9931 in newer builds), vLLM (8000), SGLang (30000), Ollama (11434).
USUAL_PORTS = (8080, 9931, 8000, 30000, 11434)

# A port that answers at all answers these quickly; a slow one is not the server we want.
LOOK_LIMIT = 3.0

# How long a server that is there but still loading its model (503) is waited for, and
# how often it is asked again.
LOAD_LIMIT = 300.0
LOAD_POLL = 1.0

Waiting = Callable[[str], None]


@dataclass(frozen=True, slots=True)
class PortState:
    """What listens on a gateway's address: nothing, a Sakur4 gateway (with its /health
    report), or something else."""

    kind: Literal["free", "sakur4", "other"]
    report: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class Backend:
    url: str
    identity: Identity


def is_sakur4_health(report: Any) -> bool:
    """A Sakur4 gateway's ``GET /health`` (ok or 503) names its backend and its profile."""
    return isinstance(report, Mapping) and "backend" in report and "profile" in report


async def port_state(url: str) -> PortState:
    """Who answers at ``url``: refused -> free; a Sakur4 /health -> sakur4; else other."""
    try:
        async with httpx.AsyncClient(timeout=LOOK_LIMIT) as http:
            answer = await http.get(f"{url}/health")
    except httpx.ConnectError:
        return PortState("free", {})
    except httpx.HTTPError:
        return PortState("other", {})
    try:
        report = answer.json()
    except ValueError:
        return PortState("other", {})
    if is_sakur4_health(report):
        return PortState("sakur4", report)
    return PortState("other", {})


async def _identified(url: str) -> Identity | None:
    try:
        async with HttpBackend(url, timeout=LOOK_LIMIT) as http:
            found = await identify(http, time_limit=LOOK_LIMIT)
    except BackendError as e:
        if e.status == 503:
            raise  # there, but not ready: the caller waits for it
        return None
    return None if found.kind == "unknown" else found


async def _loaded(url: str, within: float, waiting: Waiting | None) -> Identity | None:
    """The server at ``url`` once it has loaded its model, None when none answers there.

    llama-server answers every route with 503 ``Loading model`` until its model is in
    memory (issue 41: a wrap started right after it said no server existed); that is
    waited for, ``waiting`` told once, up to ``within`` seconds."""
    deadline = time.monotonic() + within
    said = False
    while True:
        try:
            return await _identified(url)
        except BackendError as e:
            if time.monotonic() > deadline:
                raise BackendUnavailable(
                    url, f"still not ready after {within:g} s: {e.what}", e.status
                ) from e
            if not said and waiting is not None:
                waiting(f"waiting for the server at {url} to load ({_said(e.what)})…")
                said = True
        await asyncio.sleep(LOAD_POLL)


def _said(what: str) -> str:
    # "GET /props answered HTTP 503 unavailable_error: Loading model" -> "Loading model"
    return what.rsplit(": ", 1)[-1]


async def find_backend(
    given: str | None,
    host: str = "127.0.0.1",
    ports: Sequence[int] = USUAL_PORTS,
    *,
    waiting: Waiting | None = None,
    within: float = LOAD_LIMIT,
) -> Backend:
    """The inference server to put behind the gateway: ``given``, else the first of
    ``ports`` on ``host`` where a server (not a Sakur4 gateway) answers. A server still
    loading its model is waited for (``waiting`` is told so), ``within`` seconds at most."""
    if given:
        url = normalize_url(given)
        found = await _loaded(url, within, waiting)
        if found is None:
            raise BackendUnavailable(url, "no inference server answers there")
        return Backend(url, found)
    for port in ports:
        url = f"http://{host}:{port}"
        if (await port_state(url)).kind == "sakur4":
            continue  # a gateway, not a server to put behind one
        found = await _loaded(url, within, waiting)
        if found is not None:
            return Backend(url, found)
    listed = ", ".join(str(p) for p in ports)
    raise SettingsError(
        f"no inference server found on {host} ports {listed}: start llama-server, "
        "or give --backend URL (or SAKUR4_BACKEND)"
    )


async def served_model(gateway: str) -> str:
    """The model name the server behind ``gateway`` serves (its first /v1/models entry)."""
    async with HttpBackend(gateway, timeout=30.0) as http:
        models = await http.get_json("/v1/models")
    data = models.get("data") if isinstance(models, Mapping) else None
    if isinstance(data, list) and data and isinstance(data[0], Mapping) and data[0].get("id"):
        return str(data[0]["id"])
    raise BackendUnavailable(gateway, f"GET /v1/models names no model: {str(models)[:120]!r}")


async def gateway_ready(
    url: str, within: float, waiting: Callable[[str], None]
) -> Mapping[str, Any]:
    """The gateway's ``/health`` report once it is linked to its backend (200, ``ok``).

    A gateway answers before its backend is probed (503 naming why); ``waiting`` is told
    that once. Raises BackendUnavailable when ``within`` seconds pass first."""
    deadline = time.monotonic() + within
    said = False
    why = "no answer"
    async with httpx.AsyncClient(timeout=30.0) as http:
        while time.monotonic() < deadline:
            try:
                answer = await http.get(f"{url}/health")
                report = answer.json()
            except (httpx.HTTPError, ValueError) as e:
                why = f"{type(e).__name__}: {e}"
            else:
                if answer.status_code == 200 and isinstance(report, Mapping):
                    return report
                why = str(report.get("error") if isinstance(report, Mapping) else report)
                if not said:
                    waiting(f"waiting for the gateway's backend: {why}")
                    said = True
            await asyncio.sleep(1.0)
    raise BackendUnavailable(url, f"the gateway's backend was not ready in {within:g} s: {why}")
