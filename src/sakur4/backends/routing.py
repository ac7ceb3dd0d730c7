"""A stable routing key per session, for the routers teams put in front of vLLM and
SGLang: each router keeps a session on the upstream that holds its cached prefix only
if every request of the session tells it which session it is.

What each documented router reads (2026):

- SGLang Model Gateway (smg, ``--routing-key-override`` / ``manual`` /
  ``consistent_hashing`` policies): the ``x-smg-routing-key`` header by default
  (``--routing-key-headers`` names others; docs "Sticky Sessions and Routing Keys").
- vLLM production-stack router (``--routing-logic session``): the header named by
  ``--session-key`` (its examples use ``x-user-id``).
- llm-d's inference scheduler (``session-affinity-scorer``): the ``llm-d-session``
  cookie its response sets (the pod, base64), sent back on later requests; older
  releases used an ``x-session-token`` header the same way (docs/session_affinity.md).

So each session's requests carry its key in every header of ``SAKUR4_ROUTING_HEADERS``
(default ``x-smg-routing-key,x-user-id,x-session-id``), and echo the affinity cookie or
token the router last answered for that session. The key is a digest of the project
and session: stable across gateway restarts, naming neither.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field

import httpx

# Cookies and headers a router sets on a response to pin the session to an upstream.
AFFINITY_COOKIES = ("llm-d-session",)
AFFINITY_HEADER = "x-session-token"  # a header name, not a secret


def routing_key(project_id: int, session: str) -> str:
    """The routing key of one session: the same for every request it sends."""
    digest = hashlib.sha256(f"{project_id}\0{session}".encode()).hexdigest()
    return f"sakur4-{digest[:24]}"


@dataclass
class Route:
    """What one session's requests tell a router: its key, and the affinity a router
    answered with (llm-d's cookie or token), echoed back."""

    key: str
    names: Sequence[str]
    cookies: dict[str, str] = field(default_factory=dict)
    token: str | None = None

    def headers(self) -> dict[str, str]:
        out = {name: self.key for name in self.names}
        if self.cookies:
            out["cookie"] = "; ".join(f"{k}={v}" for k, v in sorted(self.cookies.items()))
        if self.token:
            out[AFFINITY_HEADER] = self.token
        return out

    def learn(self, headers: httpx.Headers) -> None:
        """Keep the affinity a router set on its answer for the session's next requests."""
        for raw in headers.get_list("set-cookie"):
            name, _, rest = raw.partition("=")
            if name.strip() in AFFINITY_COOKIES:
                self.cookies[name.strip()] = rest.split(";", 1)[0].strip()
        token = headers.get(AFFINITY_HEADER)
        if token:
            self.token = token


def session_route(headers: str, project_id: int, session: str) -> Route:
    """The route of one session: its key in each of ``headers`` (comma-separated, as
    ``SAKUR4_ROUTING_HEADERS`` names them)."""
    names = [h.strip() for h in headers.split(",") if h.strip()]
    return Route(routing_key(project_id, session), names)


# The probe's route: its cache experiment belongs to no session (project 0 is no project).
PROBE_SESSION = "sakur4-probe"


def probe_route(headers: str) -> dict[str, str]:
    """The headers of the probe's requests: one key of its own, so a router sends its
    cache experiment's requests, which must meet one server's cache, all to one upstream
    (vllm-router's consistent hash placed them by each body's hash, over both workers:
    the probe found no checkpoints where each worker had them)."""
    return session_route(headers, 0, PROBE_SESSION).headers()
