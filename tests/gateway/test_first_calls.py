"""Sessions as harnesses have them, on the real llama-server (issue 31).

- A first call over the window (a new session: nothing cached) is cut to fit by the
  planner with the newest material kept, never to a bare head: an 11k-token history
  was cut to 474 tokens, all five files folded.
- aider's calls land in one conversation: its system prompt carries the time to the
  second, and its history summary runs under a system prompt of its own
  (``tests/fixtures/harness/aider-calls.json``).
- Pressure counts everything the server processes, the tool definitions included.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import openai
import pytest

from gateway_receipts import receipts_of
from sakur4.backends.launcher import LlamaServer

HARNESS = Path(__file__).parents[1] / "fixtures" / "harness"
WINDOW = 8192


@pytest.fixture(scope="module")
def gw(llama_ring_cms: LlamaServer, module_gateways: Any) -> Any:
    return module_gateways.start(llama_ring_cms.url, checkpoint_min_step=256)


def _client(gw: Any) -> openai.OpenAI:
    return openai.OpenAI(base_url=gw.url + "/v1", api_key="unused", max_retries=0)


def _files() -> dict[str, str]:
    files: dict[str, str] = json.loads((HARNESS / "opencode-stuck.json").read_text())["files"]
    return files


@pytest.mark.backend
def test_a_first_call_over_the_window_keeps_the_newest_material(gw: Any) -> None:
    files = _files()
    names = ["folds", "planner", "log1", "log2", "system"]
    messages: list[dict[str, Any]] = [{"role": "system", "content": "You read code."}]
    for n, name in enumerate(names):
        cid = f"call_{n}"
        messages += [
            {"role": "user", "content": f"Read {name}."},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": cid,
                        "type": "function",
                        "function": {"name": "read", "arguments": json.dumps({"name": name})},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": cid, "content": files[name]},
            {"role": "assistant", "content": f"{name} read."},
        ]
    messages.append({"role": "user", "content": "Compare the last two files."})
    with _client(gw) as client:
        raw = client.chat.completions.with_raw_response.create(
            model="any",
            messages=messages,  # type: ignore[arg-type]
            max_tokens=2,
            extra_headers={"X-Sakur4-Session": "first-call"},
        )
    assert raw.parse().choices
    (r,) = receipts_of(gw, "first-call")
    sent = json.dumps(gw.transport.sent[-1]["messages"])
    assert r.detail["planned_prompt_tokens"] > WINDOW  # the history did not fit as sent
    assert r.prompt_tokens <= WINDOW
    # Cut to about the target, not to a bare head (474 tokens before the fix).
    assert r.prompt_tokens > 0.4 * WINDOW, r.detail["reason"]
    assert "the oldest material steps first" in r.detail["reason"]
    assert json.dumps(files["system"])[1:-1] in sent  # the newest file, Live
    assert json.dumps(files["folds"])[1:-1] not in sent  # the oldest, folded


@pytest.mark.backend
def test_aider_calls_are_one_conversation(gw: Any) -> None:
    requests = json.loads((HARNESS / "aider-calls.json").read_text())["requests"]
    before = {r.id for r in receipts_of(gw)}
    with _client(gw) as client:
        for request in requests:
            body = request["body"]
            if body.get("stream"):
                with client.chat.completions.create(**body) as stream:
                    assert list(stream)
            else:
                assert client.chat.completions.create(**body).choices
    mine = [r for r in receipts_of(gw) if r.id not in before]
    assert len(mine) == len(requests)
    # Before the fix: five sessions (the clock in the system prompt, the summary's own).
    assert len({r.session for r in mine}) == 1, [(r.session, r.turn) for r in mine]
    assert [r.turn for r in mine] == [1, 2, 3, 4, 5]


@pytest.mark.backend
def test_pressure_counts_the_tool_definitions(gw: Any) -> None:
    stuck = json.loads((HARNESS / "opencode-stuck.json").read_text())
    tools = stuck["tools"]
    files = stuck["files"]
    text = (files["planner"] + files["log1"] + files["log2"])[:19_000]
    messages = [
        {"role": "system", "content": files["system"]},
        {"role": "user", "content": "Review this.\n" + text},
    ]
    with _client(gw) as client:
        client.chat.completions.create(
            model="any",
            messages=messages,  # type: ignore[arg-type]
            tools=tools,
            max_tokens=2,
            extra_headers={"X-Sakur4-Session": "with-tools"},
        )
    (r,) = receipts_of(gw, "with-tools")
    measured = r.detail.get("server_counted_prompt") or r.prompt_tokens
    assert measured >= 0.75 * WINDOW, "the scenario must cross the trigger with its tools"
    # Before the fix: "fits", the reason "pressure 0.7x < trigger 0.75".
    assert r.verdict != "fits", r.detail["reason"]
    assert "≥ trigger" in r.detail["reason"]
