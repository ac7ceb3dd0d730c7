"""The chat template Sakur4 ships for the packaged model, on the real llama-server.

The packaged GGUF (Gemma 3 270M, pretrained) carries no template. llama-server then
falls back to ChatML, which the model follows as text: it closes an answer with
``<|im_end|>`` written out, which nothing stopped, so every answer ran to the output
cap, and tool calls were neither rendered nor parsed (issue 41). Every server Sakur4
starts with that model gets ``launcher.PACKAGED_TEMPLATE``: the fallback's rendering
plus tool calls, and stops at a turn's and a tool call's end. ``sakur4 probe`` and
``sakur4 doctor`` warn about a server on the fallback (``llama_fallback``).
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import httpx
import pytest
from click.testing import CliRunner

import sakur4
from sakur4.backends.launcher import (
    MODEL_FILE,
    PACKAGED_TEMPLATE,
    ChatTemplate,
    LlamaServer,
    ServerFlags,
    chat_template_for,
)
from sakur4.backends.llamacpp import LlamaCppClient
from sakur4.cli import cli
from sakur4.probe import LLAMA_FALLBACK_TEMPLATE, TemplateCheck, probe, template_check
from sakur4.settings import Settings

# Far above what these answers take (≤ 16 tokens each, measured): a capped answer is
# one that never ended.
GENEROUS_CAP = 64
MARKERS = ("<|im_end|>", "<|im_start|>", "<end_of_turn>", "<start_of_turn>", "</tool_call>")
CHATS: list[list[dict[str, Any]]] = [
    [
        {"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": "Say hello."},
    ],
    [{"role": "user", "content": "What is the capital of France? One short sentence."}],
    [
        {"role": "user", "content": "Name a colour."},
        {"role": "assistant", "content": "Blue."},
        {"role": "user", "content": "Name a fruit."},
    ],
]
READ_TOOL = {
    "type": "function",
    "function": {
        "name": "read_file",
        "description": "Read a file of the project.",
        "parameters": {
            "type": "object",
            "properties": {"path": {"type": "string", "description": "the file's path"}},
            "required": ["path"],
        },
    },
}


def read_call(n: int, path: str) -> dict[str, Any]:
    arguments = json.dumps({"path": path})
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": f"c{n}",
                "type": "function",
                "function": {"name": "read_file", "arguments": arguments},
            }
        ],
    }


# What harnesses send: a system prompt, two calls in one answer, two results in a row,
# the user's next words, and a late system message (the gateway's riders are one).
AGENT_TURNS: list[dict[str, Any]] = [
    {"role": "system", "content": "You are a coding agent."},
    {"role": "user", "content": "Read a.py and b.py."},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [*read_call(1, "a.py")["tool_calls"], *read_call(2, "b.py")["tool_calls"]],
    },
    {"role": "tool", "tool_call_id": "c1", "content": "print('A')"},
    {"role": "tool", "tool_call_id": "c2", "content": "print('B')"},
    {"role": "user", "content": "Which one prints B?"},
    {"role": "system", "content": "Remember: run the tests with pytest -x."},
]
# Conversations without tool calls, in every content shape the fallback takes.
PLAIN: list[list[dict[str, Any]]] = [
    *CHATS,
    [
        {
            "role": "system",
            "content": [{"type": "text", "text": "S1"}, {"type": "text", "text": "S2"}],
        },
        {
            "role": "user",
            "content": [{"type": "text", "text": " a "}, {"type": "text", "text": "b"}],
        },
        {"role": "user", "content": "  again \n"},
        {"role": "tool", "tool_call_id": "c1", "content": "RESULT"},
        {"role": "system", "content": "rider"},
    ],
]


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def post(server: LlamaServer, path: str, body: dict[str, Any]) -> dict[str, Any]:
    r = httpx.post(f"{server.url}{path}", json=body, timeout=600)
    assert r.status_code == 200, r.text
    answer: dict[str, Any] = r.json()
    return answer


def render(server: LlamaServer, body: dict[str, Any]) -> str:
    return str(post(server, "/apply-template", body)["prompt"])


def test_the_packaged_model_and_only_it_gets_the_template_and_its_stops() -> None:
    assert PACKAGED_TEMPLATE.path.is_file()
    assert PACKAGED_TEMPLATE.path.is_relative_to(Path(sakur4.__file__).parent)  # package data
    packaged = Path("/models") / MODEL_FILE
    assert chat_template_for(packaged) == PACKAGED_TEMPLATE
    assert chat_template_for(Path("/models/qwen3-0.6b.gguf")) is None
    args = ServerFlags().args(packaged)
    i = args.index("--jinja")
    assert args[i:] == [
        "--jinja",
        "--chat-template-file",
        str(PACKAGED_TEMPLATE.path),
        "-r",
        "<|im_end|>",
        "-r",
        "</tool_call>",
    ]
    own = ChatTemplate(Path("/t/mine.jinja"))
    assert ServerFlags(chat_template=own).template_for(packaged) == own
    assert "--chat-template-file" not in ServerFlags(server_template=True).args(packaged)
    assert "--chat-template-file" not in ServerFlags().args(Path("/models/other.gguf"))
    assert "--chat-template-file" not in ServerFlags().args()


def test_the_documented_flags_are_the_ones_started() -> None:
    docs = (Path(__file__).parents[2] / "docs" / "harnesses.md").read_text("utf-8")
    flags = PACKAGED_TEMPLATE.shell().replace(str(PACKAGED_TEMPLATE.path), "PATH")
    assert f"`... {flags}`" in " ".join(docs.split())  # the whole inline line


@pytest.mark.backend
@pytest.mark.parametrize("chat", range(len(CHATS)))
def test_an_answer_ends_before_a_generous_cap(llama_ring: LlamaServer, chat: int) -> None:
    body = {"messages": CHATS[chat], "max_tokens": GENEROUS_CAP, "temperature": 0}
    answer = post(llama_ring, "/v1/chat/completions", body)
    choice = answer["choices"][0]
    text = choice["message"]["content"]
    assert choice["finish_reason"] == "stop", text
    assert answer["usage"]["completion_tokens"] < GENEROUS_CAP
    assert not [m for m in MARKERS if m in text]


@pytest.mark.backend
def test_an_answer_on_the_messages_api_ends_its_turn(llama_ring: LlamaServer) -> None:
    """The route Claude Code's requests reach the server by (the gateway forwards
    /v1/messages where the server serves it): it retried an answer cut at the cap."""
    body = {"model": "local", "messages": CHATS[1], "max_tokens": GENEROUS_CAP}
    answer = post(llama_ring, "/v1/messages", body)
    assert answer["stop_reason"] == "end_turn", answer
    assert answer["usage"]["output_tokens"] < GENEROUS_CAP


@pytest.mark.backend
def test_on_the_fallback_an_answer_runs_to_the_cap(llama_fallback: LlamaServer) -> None:
    """What the template and its stops fix, seen on the server without them (issue 41)."""
    body = {"messages": CHATS[0], "max_tokens": 32, "temperature": 0}
    choice = post(llama_fallback, "/v1/chat/completions", body)["choices"][0]
    assert choice["finish_reason"] == "length"
    assert "<|im_end|>" in choice["message"]["content"]


@pytest.mark.backend
@pytest.mark.parametrize("chat", range(len(PLAIN)))
def test_a_conversation_without_tool_calls_renders_as_the_fallback_does(
    llama_ring: LlamaServer, llama_fallback: LlamaServer, chat: int
) -> None:
    """So every prompt without tool calls keeps its tokens (pinned figures hold)."""
    for generation in (True, False):
        body = {"messages": PLAIN[chat], "add_generation_prompt": generation}
        assert render(llama_ring, body) == render(llama_fallback, body)


@pytest.mark.backend
def test_tool_calls_and_results_render(
    llama_ring: LlamaServer, llama_fallback: LlamaServer
) -> None:
    body = {"messages": AGENT_TURNS, "tools": [READ_TOOL]}
    prompt = render(llama_ring, body)
    assert prompt == (
        "<|im_start|>system\nYou are a coding agent.<|im_end|>\n"
        "<|im_start|>user\nRead a.py and b.py.<|im_end|>\n"
        "<|im_start|>assistant\n<tool_call>\n"
        '{"name": "read_file", "arguments": {"path": "a.py"}}\n</tool_call>\n<tool_call>\n'
        '{"name": "read_file", "arguments": {"path": "b.py"}}\n</tool_call><|im_end|>\n'
        "<|im_start|>tool\nprint('A')<|im_end|>\n"
        "<|im_start|>tool\nprint('B')<|im_end|>\n"
        "<|im_start|>user\nWhich one prints B?<|im_end|>\n"
        "<|im_start|>system\nRemember: run the tests with pytest -x.<|im_end|>\n"
        "<|im_start|>assistant\n"
    )
    # A prefix of the conversation renders as a prefix of its render (cacheable turns).
    head = {**body, "messages": AGENT_TURNS[:4], "add_generation_prompt": False}
    assert prompt.startswith(render(llama_ring, head))
    # The fallback drops the calls: the answer that made them is an empty turn.
    assert "<tool_call>" not in render(llama_fallback, body)


@pytest.mark.backend
def test_a_tool_call_the_model_writes_is_parsed_and_ends_the_answer(
    llama_ring: LlamaServer,
) -> None:
    # Two calls and their results before: this pretrained model writes a call by example.
    messages = [
        {"role": "user", "content": "Read the file a.py."},
        read_call(1, "a.py"),
        {"role": "tool", "tool_call_id": "c1", "content": "print('a')"},
        {"role": "user", "content": "Read the file b.py."},
        read_call(2, "b.py"),
        {"role": "tool", "tool_call_id": "c2", "content": "print('b')"},
        {"role": "user", "content": "Read the file setup.py."},
    ]
    body = {
        "messages": messages,
        "tools": [READ_TOOL],
        "max_tokens": GENEROUS_CAP,
        "temperature": 0,
    }
    choice = post(llama_ring, "/v1/chat/completions", body)["choices"][0]
    (call,) = choice["message"]["tool_calls"]
    assert call["function"]["name"] == "read_file"
    assert set(json.loads(call["function"]["arguments"])) == {"path"}
    assert choice["finish_reason"] == "tool_calls"
    assert not [m for m in MARKERS if m in (choice["message"].get("content") or "")]


@pytest.mark.backend
def test_probe_and_doctor_warn_about_the_fallback_template(
    llama_fallback: LlamaServer, llama_ring: LlamaServer, store_path: Path
) -> None:
    async def check(url: str) -> TemplateCheck | None:
        async with LlamaCppClient(url, timeout=60) as c:
            return await template_check(c)

    props = httpx.get(f"{llama_fallback.url}/props", timeout=30).json()
    assert props["chat_template"] == LLAMA_FALLBACK_TEMPLATE
    fallback = run(check(llama_fallback.url))
    assert fallback is not None
    assert fallback.fallback
    assert "ChatML fallback" in fallback.verdict
    assert "<|im_start|>, <|im_end|> are text to this model" in fallback.verdict
    assert "--chat-template-file" in fallback.verdict
    ours = run(check(llama_ring.url))
    assert ours is not None
    assert not ours.fallback
    assert "(<|im_start|>, <|im_end|>)" in ours.verdict  # said, not warned about

    found = run(probe(llama_fallback.url, Settings.load(), experiment=False))
    assert found.template_fallback
    assert found.advice[0].startswith("chat template llama-server's ChatML fallback")
    assert not run(probe(llama_ring.url, Settings.load(), experiment=False)).template_fallback

    args = ["--store", str(store_path), "probe", "--quick", llama_fallback.url]
    out = CliRunner().invoke(cli, args)
    assert out.exit_code == 0, out.output
    assert "advice: chat template llama-server's ChatML fallback" in out.output

    for url, level in ((llama_fallback.url, "warn"), (llama_ring.url, "ok")):
        args = ["--store", str(store_path), "doctor", "--json"]
        doctor = CliRunner().invoke(cli, args, env={"SAKUR4_BACKEND": url})
        report = json.loads(doctor.output)
        (row,) = [c for c in report["checks"] if c["name"] == "chat template"]
        assert row["level"] == level, row
        assert doctor.exit_code == 0  # a warning row: doctor never fails for it
