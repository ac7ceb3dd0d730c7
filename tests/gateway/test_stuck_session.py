"""A harness session never gets stuck (issue 31), replayed on the real llama-server.

The OpenCode session that became stuck is replayed from its requests
(``tests/fixtures/harness/opencode-stuck.json``): two turns whose answers failed (the
timeouts are staged as backend errors: the one fake here), then the next turn and
OpenCode's ``/compact``. Before the fix, the failed turns' messages all counted as the
current turn, which no plan shrinks: both were refused with a wording no harness
reads as an overflow. When the current turn alone cannot fit, the refusal speaks the
words harnesses compact on (OpenCode: ``context_length_exceeded``, "exceeds the context
window"; Claude Code: ``prompt is too long: N tokens > M maximum``). OpenCode's retry
of a failed call is the same turn again, not a new one.

Claude Code's session that stayed stuck (issue 41) is replayed from its recorded
requests: a turn with two ``@``-attached files past the window, then its compaction
and the next ``--continue`` prompt. The attachments fold (the user's words stay) where
every one of those turns was refused.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

import anthropic
from gateway_receipts import receipts_of
from sakur4.backends.launcher import LlamaServer
from sakur4.harnesses.claude_code import COMPACTION_TASK as CLAUDE_CODE_TASK

FIXTURE = Path(__file__).parents[1] / "fixtures" / "harness" / "opencode-stuck.json"
WINDOW = 8192


def _expand(value: Any, files: dict[str, str], tools: list[Any]) -> Any:
    if value == "{{tools}}":
        return tools
    if isinstance(value, str):
        return re.sub(r"\{\{file:(\w+)\}\}", lambda m: files[m.group(1)], value)
    if isinstance(value, list):
        return [_expand(v, files, tools) for v in value]
    if isinstance(value, dict):
        return {k: _expand(v, files, tools) for k, v in value.items()}
    return value


def recorded() -> list[dict[str, Any]]:
    """The fixture's requests, each with its body as OpenCode sent it."""
    data = json.loads(FIXTURE.read_text())
    return [
        {**r, "body": _expand(r["body"], data["files"], data["tools"])} for r in data["requests"]
    ]


def _send(client: openai.OpenAI, body: dict[str, Any]) -> tuple[int, str]:
    """Send one recorded body as OpenCode would (streamed); the status and error text."""
    try:
        with client.chat.completions.create(**body) as stream:
            chunks = list(stream)
        assert chunks
        return 200, ""
    except openai.APIStatusError as e:
        return e.status_code, json.dumps(e.body)


@pytest.mark.backend
def test_the_stuck_opencode_session_recovers_timeouts_staged(
    llama_ring_cms: LlamaServer, start_gateway: Any
) -> None:
    gw = start_gateway(llama_ring_cms.url, checkpoint_min_step=256)
    statuses: list[int] = []
    errors: list[str] = []
    with openai.OpenAI(base_url=gw.url + "/v1", api_key="unused", max_retries=0) as client:
        for request in recorded():
            if request.get("fault"):
                gw.transport.faults.append("500")  # the timeout the session hit
            status, error = _send(client, request["body"])
            statuses.append(status)
            errors.append(error)
    # Before the fix: [..., 400, 400], stuck from the turn after the failures on.
    assert statuses == [200, 200, 200, 503, 503, 503, 200, 200], list(
        zip(statuses, errors, strict=True)
    )

    receipts = sorted(receipts_of(gw), key=lambda r: r.id)
    assert [bool(r.detail.get("failed")) for r in receipts[:6]] == [0, 0, 0, 1, 1, 1]
    # OpenCode's retry of the failed call is that turn again, not a new one.
    failed, retried = receipts[3], receipts[4]
    assert retried.turn == failed.turn
    assert retried.detail["retry_of"] == failed.id
    assert receipts[5].turn == failed.turn + 1
    turn, compaction = receipts[-2], receipts[-1]
    assert compaction.session != turn.session  # a new session
    assert compaction.turn == 1
    for r in (turn, compaction):
        assert r.verdict in ("reclaimed", "stepping"), r.detail["reason"]
        assert r.prompt_tokens <= WINDOW
    # What was sent: the failed turns' messages folded, the turn asked now kept whole;
    # for /compact, its instruction whole and the newest of what it summarises Live.
    files = json.loads(FIXTURE.read_text())["files"]
    newest, failed_file = (json.dumps(files[n])[1:-1] for n in ("log2", "log1"))
    turn_sent, compact_sent = (json.dumps(b["messages"]) for b in gw.transport.sent[-2:])
    assert newest in turn_sent
    assert failed_file not in turn_sent
    assert newest in compact_sent
    assert "Provide a detailed prompt" in json.dumps(gw.transport.sent[-1]["messages"][-1])


@pytest.mark.backend
def test_a_turn_that_alone_cannot_fit_is_refused_as_an_overflow(
    llama_ring_cms: LlamaServer, start_gateway: Any
) -> None:
    gw = start_gateway(llama_ring_cms.url, checkpoint_min_step=256)
    paste = "\n".join(json.loads(FIXTURE.read_text())["files"].values()) * 2
    messages = [{"role": "system", "content": "You help."}, {"role": "user", "content": paste}]
    with (
        openai.OpenAI(base_url=gw.url + "/v1", api_key="unused", max_retries=0) as oa,
        pytest.raises(openai.BadRequestError) as caught,
    ):
        oa.chat.completions.create(model="any", messages=messages, max_tokens=2)  # type: ignore[arg-type]
    error = caught.value.body
    assert isinstance(error, dict)
    # OpenCode: the code, and its pattern for OpenAI's wording.
    assert error["code"] == "context_length_exceeded"
    assert "exceeds the context window" in error["message"]
    needed = re.search(r"prompt is too long: (\d+) tokens > (\d+) maximum", error["message"])
    assert needed is not None
    assert int(needed.group(2)) == WINDOW
    assert int(needed.group(1)) > WINDOW

    with (
        anthropic.Anthropic(base_url=gw.url, api_key="unused", max_retries=0) as an,
        pytest.raises(anthropic.BadRequestError) as refused,
    ):
        an.messages.create(
            model="any",
            max_tokens=2,
            system="You help.",
            messages=[{"role": "user", "content": paste}],
        )
    body = refused.value.body
    assert isinstance(body, dict)
    assert body["error"]["type"] == "invalid_request_error"
    # Claude Code's wording (Anthropic's): it compacts on it.
    assert re.search(r"prompt is too long: \d+ tokens > 8192 maximum", body["error"]["message"])


# -- Claude Code's oversized @-attachments (issue 41) ---------------------------------

CLAUDE_CODE = Path(__file__).parents[1] / "fixtures" / "harnesses" / "claude_code_p_continue.json"
SESSION = {"x-claude-code-session-id": "4b1c0f9e-stuck-attachments"}


def _file(name: str, lines: int) -> str:
    """A module of ``lines`` lines, as Claude Code's Read tool numbers them."""
    return "\n".join(
        f"{n}\tdef {name}_{n}(value):  return value * {n} + {n % 7}" for n in range(lines)
    )


def claude_code_request(turn: int, extra: tuple[str, ...] = ()) -> dict[str, Any]:
    """Claude Code's recorded request ``turn`` (2.1.332, ``-p`` then ``--continue``) with
    its Read tool alone (its twelve tools are ~8k tokens, a window of their own here),
    an answer of a few tokens, and on its ``@alpha.py`` turn two attached files of ~10k
    tokens each (the issue's 20,530 tokens); ``extra``: the text blocks Claude Code adds
    to that user message on a later request (a ``--continue`` prompt, its compaction's
    instruction)."""
    body = json.loads(CLAUDE_CODE.read_text(encoding="utf-8"))["requests"][turn]
    body["tools"] = [t for t in body["tools"] if t["name"] == "Read"]
    body |= {"max_tokens": 8, "stream": False}
    blocks = body["messages"][-1]["content"]
    if turn == 5:
        at = next(i for i, b in enumerate(blocks) if "Result of calling" in b.get("text", ""))
        read = "<system-reminder>\nResult of calling the Read tool:\n{}\n</system-reminder>\n"
        called = (
            "<system-reminder>\nCalled the Read tool with the following input: "
            '{{"file_path":"/work/demo/{}"}}\n</system-reminder>\n'
        )
        blocks[at]["text"] = read.format(_file("alpha", 600))
        blocks[at + 1 : at + 1] = [
            {"type": "text", "text": called.format("beta.py")},
            {"type": "text", "text": read.format(_file("beta", 600))},
        ]
    blocks.extend({"type": "text", "text": t} for t in extra)
    return body


@pytest.mark.backend
def test_claude_codes_oversized_attachments_never_pin_the_session(
    llama_ring_cms: LlamaServer, start_gateway: Any
) -> None:
    gw = start_gateway(llama_ring_cms.url, checkpoint_min_step=256)
    follow = "Which of the two modules is longer?"
    requests = [
        claude_code_request(4),  # the session so far
        claude_code_request(5),  # "Look at @alpha.py again": two files attached
        claude_code_request(5, ("CRITICAL: Respond with TEXT ONLY. " + CLAUDE_CODE_TASK,)),
        claude_code_request(5, (follow,)),  # the next --continue prompt
    ]
    answers = []
    with httpx.Client(base_url=gw.url, timeout=600) as client:
        for body in requests:
            r = client.post("/v1/messages", json=body, headers=SESSION)
            answers.append((r.status_code, r.text[:300]))
    # Before: [200, 400, 400, 400]: the attachment turn "prompt is too long: 2x,xxx tokens
    # > 8192 maximum", then Claude Code's compaction and every --continue turn after it.
    assert [s for s, _ in answers] == [200, 200, 200, 200], answers
    receipts = sorted(receipts_of(gw), key=lambda r: r.id)
    assert [r.verdict != "refused" for r in receipts] == [True] * 4
    attached, compaction, followed = receipts[1:]
    for r in (attached, compaction, followed):
        assert r.prompt_tokens <= WINDOW
        assert r.session == attached.session
    folded = [s for s in attached.steps if (s["from"], s["to"]) == ("live", "masked")]
    assert len(folded) >= 1
    assert "unread attachment(s) folded" in attached.detail["reason"]
    # What the server got: the user's words whole, the files as folds.
    for sent, said in zip(
        gw.transport.sent_messages[1:], ("@alpha.py", CLAUDE_CODE_TASK, follow), strict=True
    ):
        text = json.dumps(sent["messages"][-1])
        assert said in text
        assert "open_fold(" in text
        assert "beta_590" not in text
    assert compaction.detail.get("compaction", {}).get("harness") == "claude-code"
