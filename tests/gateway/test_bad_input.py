"""Every bad input gets a clear OpenAI-shaped answer, and a refused request stores
nothing (issue 15, rows 5-9 and 18), on a real uvicorn-served gateway in front of the
real llama-server, through the ``openai`` SDK where a harness would use it."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest

from sakur4.backends.launcher import LlamaServer
from sakur4.errors import TooLarge
from sakur4.receipts import list_receipts
from sakur4.store import open_store
from sakur4.store.projects import ensure_project
from sakur4.turns.validate import MAX_MESSAGE_BYTES, MAX_MESSAGES, chat_messages
from tracebacks import Logged

CHAT = "/v1/chat/completions"
JSON = {"Content-Type": "application/json"}
HELLO = [{"role": "user", "content": "Say ok."}]


@pytest.fixture(scope="module")
def gw(llama_ring: LlamaServer, module_gateways: Any) -> Any:
    return module_gateways.start(llama_ring.url)


@pytest.fixture
def sdk(gw: Any) -> Iterator[openai.OpenAI]:
    """The openai SDK on the gateway, closed at the test's end, not left to the collector."""
    with openai.OpenAI(
        base_url=gw.url + "/v1", api_key="unused", max_retries=0, timeout=300
    ) as client:
        yield client


def _stored(gw: Any) -> tuple[int, int]:
    """(episodes, bytes of live pages: the store's pages less its free list, WAL included;
    the WAL file itself keeps the size of its largest transaction until a checkpoint)."""
    store = open_store(gw.store)
    try:
        count = int(store.query("SELECT count(*) FROM episodic_stream")[0][0])
        pages = int(store.query("PRAGMA page_count")[0][0])
        free = int(store.query("PRAGMA freelist_count")[0][0])
        size = (pages - free) * int(store.query("PRAGMA page_size")[0][0])
    finally:
        store.close()
    return count, size


def _error(r: httpx.Response, status: int) -> str:
    assert r.status_code == status, r.text
    assert r.headers["content-type"] == "application/json", r.text
    error = r.json()["error"]
    assert isinstance(error["type"], str)
    return str(error["message"])


def _post(gw: Any, body: bytes | dict[str, Any], session: str = "bad-input") -> httpx.Response:
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    headers = {**JSON, "X-Sakur4-Session": session}
    return httpx.post(gw.url + CHAT, content=content, headers=headers, timeout=300)


@pytest.mark.backend
@pytest.mark.parametrize(
    ("body", "words"),
    [
        (b'{"max_tokens": NaN, "messages": [{"role": "user", "content": "x"}]}', "NaN"),
        (b'{"max_tokens": Infinity, "messages": [{"role": "user", "content": "x"}]}', "Infinity"),
        (b'{"temperature": 1e400, "messages": [{"role": "user", "content": "x"}]}', "1e400"),
        (
            b'{"max_tokens": 99999999999999999999999, '
            b'"messages": [{"role": "user", "content": "x"}]}',
            "out of range",
        ),
        (b'{"n": 1' + b"0" * 5000 + b', "messages": []}', "out of range"),
    ],
)
def test_numbers_json_cannot_carry_are_400(
    gw: Any, body: bytes, words: str, logged: Logged
) -> None:
    # Row 5: a bare text/plain 500 with a traceback in the log.
    before = _stored(gw)[0]
    assert words in _error(_post(gw, body), 400)
    assert _stored(gw)[0] == before
    assert not logged.records


@pytest.mark.backend
@pytest.mark.parametrize(
    "given", ["99999999999999999999999", "9223372036854775808", "0", "-1", "x"]
)
def test_an_episode_id_out_of_range_is_400(gw: Any, given: str, logged: Logged) -> None:
    r = httpx.get(f"{gw.url}/sakur4/folds/{given}")
    assert "episode id must be an integer" in _error(r, 400)
    assert not logged.records


@pytest.mark.backend
@pytest.mark.parametrize("stream", [False, True])
def test_an_unexpected_error_is_an_openai_500_logged_once(
    gw: Any, stream: bool, logged: Logged
) -> None:
    # Row 6: Starlette's plain-text 500 (and uvicorn's traceback on top).
    gw.transport.faults.append("crash")
    try:
        arrived = gw.served.arrived + 1
        r = _post(gw, {"messages": HELLO, "max_tokens": 1, "stream": stream}, "crash")
        gw.served.wait(arrived)  # uvicorn would log a crash just after answering
    finally:
        gw.transport.faults.clear()  # never left for another test's request
    assert "internal error" in _error(r, 500)
    crashes = logged.take()  # expected: not a failure at teardown
    assert len(crashes) == 1, [c.getMessage() for c in crashes]
    assert "injected" in str(crashes[0].exc_info[1])  # type: ignore[index]
    assert _post(gw, {"messages": HELLO, "max_tokens": 1}, "crash").status_code == 200


@pytest.mark.backend
@pytest.mark.parametrize(
    ("last", "status", "words"),
    [
        ({"role": "wizard", "content": "hi"}, 400, "role 'wizard'"),
        ({"role": "tool", "content": "a.py"}, 400, "without its 'tool_call_id'"),
        ({"role": "user", "content": "word " * 20_000}, 400, "everything older folded"),
        ({"role": "user", "content": "x" * MAX_MESSAGE_BYTES}, 413, "at most 1,048,576"),
    ],
)
def test_a_refused_request_stores_nothing(
    gw: Any, last: dict[str, Any], status: int, words: str
) -> None:
    # Row 7: a refused request's messages were stored anyway (three refused 15 MB
    # requests grew the store to 103 MB).
    session = f"refused-{status}-{len(str(last))}"
    history = [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "First question, new to this session " + session},
    ]
    before = _stored(gw)
    for _ in range(3):
        assert words in _error(_post(gw, {"messages": [*history, last]}, session), status)
    count, size = _stored(gw)
    print(f"3 x refused ({words}): episodes +{count - before[0]}, live +{size - before[1]:,} B")
    assert count == before[0]
    assert size - before[1] < 256 * 1024, f"the store grew {size - before[1]:,} bytes"


@pytest.mark.backend
def test_too_many_messages_are_refused_with_the_limit(gw: Any) -> None:
    before = _stored(gw)[0]
    many = [{"role": "user", "content": "x"}] * (MAX_MESSAGES + 1)
    assert f"at most {MAX_MESSAGES:,}" in _error(_post(gw, {"messages": many}, "many"), 413)
    assert _stored(gw)[0] == before


@pytest.mark.backend
def test_the_developer_role_is_served(gw: Any, sdk: openai.OpenAI) -> None:
    # Row 8: 400 "needs one of assistant, system, user".
    answer = sdk.chat.completions.create(
        model="m",
        max_tokens=1,
        messages=[
            {"role": "developer", "content": "Answer in one word."},
            {"role": "user", "content": "Say ok."},
        ],
    )
    assert answer.choices
    sent = gw.transport.sent[-1]["messages"]
    assert sent[0]["role"] == "system"  # as llama.cpp's templates render it
    assert "Answer in one word." in sent[0]["content"]


@pytest.mark.backend
@pytest.mark.parametrize(
    "pair",
    [
        [
            {"role": "assistant", "content": "Let me look."},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {"id": "c1", "type": "function", "function": {"name": "ls", "arguments": "{}"}}
                ],
            },
            {"role": "tool", "tool_call_id": "c1", "content": "a.py b.py"},
        ],
        [
            {"role": "assistant", "content": "One."},
            {"role": "assistant", "content": "Two."},
            {"role": "user", "content": "And?"},
        ],
    ],
)
def test_two_assistant_messages_in_a_row_are_served(
    gw: Any, sdk: openai.OpenAI, pair: list[dict[str, Any]]
) -> None:
    # Row 9: /apply-template refuses a message prefix ending in two assistant messages.
    session = f"pair-{len(pair[1])}"
    messages: list[Any] = [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "List the files."},
        *pair,
    ]
    for turn in range(2):
        raw = sdk.chat.completions.with_raw_response.create(
            model="m", max_tokens=1, messages=messages, extra_headers={"X-Sakur4-Session": session}
        )
        assert raw.http_response.status_code == 200
        messages += [
            {"role": "assistant", "content": raw.parse().choices[0].message.content or "ok"},
            {"role": "user", "content": f"Next, turn {turn}."},
        ]


@pytest.mark.backend
def test_streamed_headers_never_give_a_wrong_verdict(gw: Any, sdk: openai.OpenAI) -> None:
    # Row 18: X-Sakur4-Summary on a stream always said "reuse unverifiable".
    session = {"X-Sakur4-Session": "streamed"}
    for turn in range(2):
        with sdk.chat.completions.with_streaming_response.create(
            model="m", max_tokens=2, messages=HELLO, stream=True, extra_headers=session
        ) as response:
            said = response.headers["x-sakur4-summary"]
            receipt_id = int(response.headers["x-sakur4-receipt"])
            lines = [line for line in response.iter_lines() if line]
        assert "reuse figures follow" in said, said
        assert "unverifiable" not in said, said
        assert "prompt tokens" not in said, said
        comments = [line for line in lines if line.startswith(":")]
        assert len(comments) == 1, lines
        assert lines[-1] == "data: [DONE]"
        store = open_store(gw.store)
        try:
            project = ensure_project(store, gw.project)
            receipt = next(
                r for r in list_receipts(store, project.id, "streamed") if r.id == receipt_id
            )
        finally:
            store.close()
        print(f"header: {said}\nclosing: {comments[0]}")
        assert comments[0] == f": x-sakur4-summary {receipt.summary()}"
        if turn == 1:
            assert "prompt tokens" in comments[0]  # the server's own figures
    # The openai SDK reads the stream with the comment in it. Closed by the block: left
    # half-read, its socket was closed by the collector, a ResourceWarning (an error
    # here) whenever the collection happened inside a later test's call.
    with sdk.chat.completions.create(
        model="m", max_tokens=2, messages=HELLO, stream=True, extra_headers=session
    ) as stream:
        assert any(chunk.choices for chunk in stream)


@pytest.mark.backend
def test_an_unknown_path_or_method_is_openai_shaped_and_a_405_says_allow(gw: Any) -> None:
    # Row 6's "404 and 405 are OpenAI-shaped too"; a 405 without `Allow` left a client
    # nothing to go on (RFC 9110 §15.5.6 requires it).
    assert "Not Found" in _error(httpx.get(f"{gw.url}/v1/nowhere"), 404)
    r = httpx.get(gw.url + CHAT)
    assert "Method Not Allowed" in _error(r, 405)
    assert r.headers["allow"] == "POST"


@pytest.mark.parametrize(
    ("content", "refused"),
    [
        ("x" * (MAX_MESSAGE_BYTES // 5), False),  # near the limit at its widest: measured
        ("\x00" * (MAX_MESSAGE_BYTES // 5), True),  # 6 bytes each as JSON: over
        ([{"type": "text", "text": "é" * (MAX_MESSAGE_BYTES // 2)}], True),  # 2 bytes each
        ("word " * 1000, False),
    ],
)
def test_the_message_size_check_measures_whatever_could_reach_the_limit(
    content: Any, refused: bool
) -> None:
    # Only a message whose strings could not reach the limit even at their widest
    # escaping skips the encoding; every other is measured as JSON.
    body = {"messages": [{"role": "user", "content": content}]}
    if refused:
        with pytest.raises(TooLarge, match="at most 1,048,576"):
            chat_messages(body)
    else:
        assert chat_messages(body) == body["messages"]
