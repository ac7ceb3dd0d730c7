"""Which harness a request came from, by its User-Agent and its shape, for the screens.

A session is otherwise listed by the hash of its opening messages. The names are what
a person recognises (Claude Code, OpenCode, aider); a client this module does not know
is named by its User-Agent's first product token (``curl 8.5.0``, ``OpenAI/Python
1.99.1``), and a request with neither by ``unknown``. The name is for display only:
nothing in the gateway's handling depends on it. Each harness declares its User-Agent
product names and its system prompt's opening words in its own file
(:mod:`sakur4.harnesses`), asked in the registry's order.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from sakur4.harnesses import KNOWN

UNKNOWN = "unknown"
_PRODUCT = re.compile(r"([A-Za-z][\w.\-]*(?:/[A-Za-z][\w.\-]*)?)/(\d[\w.\-]*)")
_SHOWN = 60


def _system_text(body: Mapping[str, Any]) -> str:
    """The system prompt's first text, in the chat or the Messages shape."""
    system = body.get("system")
    if system is None:
        messages = body.get("messages")
        first = messages[0] if isinstance(messages, list) and messages else None
        if isinstance(first, Mapping) and first.get("role") in ("system", "developer"):
            system = first.get("content")
    if isinstance(system, list):
        texts = [b.get("text") for b in system if isinstance(b, Mapping)]
        return "\n".join(t for t in texts if isinstance(t, str))
    return system if isinstance(system, str) else ""


def harness_of(headers: Mapping[str, str], body: Any) -> str:
    """The harness that sent a request (see the module)."""
    agent = (headers.get("user-agent") or "").strip()
    products = _PRODUCT.findall(agent)
    for name, version in products:
        for h in KNOWN:
            if name.lower() in h.agents:
                return f"{h.display} {version}"
    system = _system_text(body) if isinstance(body, Mapping) else ""
    # Claude Code prefixes a billing header line; the prompt's own words follow.
    opening = "\n".join(line.strip() for line in system.splitlines()[:3])
    # The harnesses whose User-Agent is their HTTP library's (OpenCode through the AI
    # SDK, aider through LiteLLM), by the opening words of their own system prompt.
    for h in KNOWN:
        if any(words in opening for words in h.openings):
            return h.display
    if products:
        return " ".join(products[0])[:_SHOWN]
    return agent.split()[0][:_SHOWN] if agent else UNKNOWN
