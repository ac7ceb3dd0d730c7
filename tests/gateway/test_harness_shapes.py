"""Over a long session in Claude Code's ``-p --continue`` shape, through the real gateway
in front of the real llama-server (window 8,192), what the agent must keep keeps its
text and what a tool returned folds (issue 30).

The session grows from a request the real Claude Code sent
(tests/fixtures/harnesses/claude_code_p_continue.json: its system blocks, its first
user message with the attribution reminder, its environment as a ``system`` message
after it), with only the ``Read`` tool's definition (all twelve are ~8k tokens, the
whole window). Each later turn is one user message as Claude Code sends it when a file
is attached: the user's words, then ``Called the Read tool …`` and ``Result of calling
the Read tool:`` reminders holding the file. The real ``anthropic`` SDK sends each turn.

Before issue 30, such a session ended with the environment Referenced and the user's
first request Archived, while the files (inside user messages) were never seen as tool
output.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import anthropic
from sakur4.backends.launcher import LlamaServer
from sakur4.episodes import session_episodes
from sakur4.receipts import list_receipts
from sakur4.store import open_store
from sakur4.store.projects import ensure_project
from sakur4.vocabulary import Nature, Tier

FIXTURE = Path(__file__).parent.parent / "fixtures" / "harnesses" / "claude_code_p_continue.json"
TURNS = 8


def opening() -> dict[str, Any]:
    """Claude Code's first request, with the Read tool alone."""
    body: dict[str, Any] = json.loads(FIXTURE.read_text(encoding="utf-8"))["requests"][0]
    return {
        "system": body["system"],
        "messages": body["messages"],
        "tools": [t for t in body["tools"] if t["name"] == "Read"],
    }


def attached(k: int) -> dict[str, Any]:
    """Turn ``k``'s user message: the request, and the file Claude Code attached to it."""
    path = f"/work/demo/mod{k}.py"
    lines = "".join(f"{i + 1}\tdef f{k}_{i}(x):  # step {i} of module {k}\n" for i in range(40))
    return {
        "role": "user",
        "content": [
            {"type": "text", "text": f"Read mod{k}.py and say what f{k}_3 does."},
            {
                "type": "text",
                "text": "<system-reminder>\nCalled the Read tool with the following input: "
                + json.dumps({"file_path": path})
                + "\n</system-reminder>\n",
            },
            {
                "type": "text",
                "text": f"<system-reminder>\nResult of calling the Read tool:\n{lines}"
                "</system-reminder>\n",
            },
        ],
    }


@pytest.mark.backend
def test_a_long_claude_code_session_keeps_requests_and_instructions_and_folds_files(
    llama_ring: LlamaServer, start_gateway: Any
) -> None:
    gw = start_gateway(llama_ring.url)
    body = opening()
    messages = list(body["messages"])
    requests = ["Read README.md and list the modules."]
    with anthropic.Anthropic(base_url=gw.url, api_key="unused", max_retries=0) as client:
        for k in range(TURNS):
            if k:
                messages += [
                    {"role": "assistant", "content": [{"type": "text", "text": "Done."}]},
                    attached(k),
                ]
                requests.append(f"Read mod{k}.py and say what f{k}_3 does.")
            client.messages.create(
                model="local",
                max_tokens=4,
                system=body["system"],
                tools=body["tools"],
                messages=messages,
                extra_headers={"X-Sakur4-Session": "cc"},
            )
    gw.served.wait(TURNS)

    store = open_store(gw.store)
    try:
        project = ensure_project(store, gw.project)
        episodes = session_episodes(store, project.id, "cc")
        receipts = list_receipts(store, project.id, session="cc", limit=100)
    finally:
        store.close()
    assert len(receipts) == TURNS
    assert all(r.detail["harness_shape"] == "claude-code" for r in receipts)
    assert not [r for r in receipts if r.verdict == "refused" or r.detail.get("failed")]
    by_nature: dict[Nature | None, list[Tier]] = {}
    for e in episodes:
        by_nature.setdefault(e.nature, []).append(e.tier)
    # The session was pressed: the window filled and the engine stepped.
    assert any(r.steps for r in receipts)
    # Kept: every request of the user's, and the harness's instructions, the
    # environment (a system message after the first user message) among them.
    assert by_nature[Nature.REQUEST] == [Tier.LIVE] * TURNS
    assert set(by_nature[Nature.INSTRUCTION]) == {Tier.LIVE}
    environment = [e for e in episodes if (e.content or "").startswith("# Environment")]
    assert [(e.role, e.nature, e.tier) for e in environment] == [
        ("system", Nature.INSTRUCTION, Tier.LIVE)
    ]
    # Folded: the files Claude Code attached inside the user's messages.
    files = by_nature[Nature.TOOL_OUTPUT]
    assert len(files) == TURNS - 1
    folded = [t for t in files if t is not Tier.LIVE]
    assert len(folded) >= 3, files
    # What the server got last: every request's words, in its user messages.
    sent = gw.transport.sent_messages[-1]
    text = json.dumps(sent["messages"])
    assert all(json.dumps(r)[1:-1] in text for r in requests)
    print({n: [t.label for t in ts] for n, ts in by_nature.items()})  # for the record
