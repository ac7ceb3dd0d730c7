"""The scripted agent: replays a session call by call, reacting to what the server saw.

The assistant's words and tool calls are scripted, so every strategy sees the same
conversation, with one exception that makes hiding cost what it costs an agent: at
a *need* turn (:class:`~sakur4.demo.scenario.Need`) the agent looks at the prompt
the server actually received for the turn's first call; if that prompt lacks the
needed ``read_file`` result in full (verbatim), the agent fetches it again — a tool
call and the full result, sent as one more call, whose tokens count like any other.
How it fetches is the strategy's (:data:`Refetch`): through Sakur4 an ``open_fold``
of the episode id the stub shows, else the same ``read_file`` call.

The agent also keeps, per tool result, how many turns it stayed in the prompt in
full after it arrived (:meth:`ScriptedAgent.live_turns`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Generator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sakur4.demo.scenario import (
    Need,
    Request,
    Session,
    ToolStep,
    assistant_call,
    attached,
    tool_result,
)

Message = dict[str, Any]
# What the strategy's agent calls to fetch a needed result again, given the messages
# the server received: the tool step to send (its result the full content).
Refetch = Callable[[Need, Sequence[Mapping[str, Any]]], ToolStep]
# Told, after each call of a replay, the tokens the server processed for it (a summary
# generated before it included): what a progress meter counts.
OnCall = Callable[[int], None]


def contents(messages: Sequence[Mapping[str, Any]]) -> str:
    """Every message's content, joined: what a verbatim check searches."""
    return "\n\x00".join(str(m.get("content") or "") for m in messages)


def same_call(need: Need, sent: Sequence[Mapping[str, Any]]) -> ToolStep:
    """The harness's own way back: the same ``read_file`` call again."""
    return ToolStep(f"reread_{need.turn}", "read_file", {"path": need.path}, need.content)


@dataclass
class _Result:
    call_id: str
    turn: int
    content: str
    gone_at: int | None = None  # the first turn whose prompt lacked it in full


@dataclass
class ScriptedAgent:
    """One pass over ``session``; drive it with :func:`drive`."""

    session: Session
    refetch: Refetch = same_call
    rereads: list[Need] = field(default_factory=list)
    _results: list[_Result] = field(default_factory=list)
    _last_turn: int = 0

    def calls(self) -> Generator[Request, Sequence[Mapping[str, Any]], None]:
        """Yields each call's request; is sent back the messages the server received."""
        s = self.session
        history: list[Message] = [{"role": "system", "content": s.system}]
        for turn in s.turns:
            user = turn.user if not turn.pin else f"{turn.pin}\n\n{turn.user}"
            steps = turn.steps
            if s.attach_reads:  # Claude Code's shape: files inside the user's message
                reads = [st for st in steps if st.name == "read_file"]
                steps = tuple(st for st in steps if st.name != "read_file")
                user = "\n\n".join([user, *(attached(st) for st in reads)])
                self._results += [_Result(st.call_id, turn.index, st.result) for st in reads]
            history.append({"role": "user", "content": user})
            if s.environment is not None and turn.index == s.turns[0].index:
                history.append({"role": "system", "content": s.environment})
            sent = yield Request(turn.index, 0, list(history), turn.pin)
            self._observe(turn.index, sent)
            step_no = 1
            if turn.need is not None and turn.need.content not in contents(sent):
                again = self.refetch(turn.need, sent)
                self.rereads.append(turn.need)
                history += [assistant_call(again), tool_result(again)]
                self._results.append(_Result(again.call_id, turn.index, again.result))
                sent = yield Request(turn.index, step_no, list(history), reread=again.name)
                self._observe(turn.index, sent)
                step_no += 1
            for step in steps:
                history += [assistant_call(step), tool_result(step)]
                self._results.append(_Result(step.call_id, turn.index, step.result))
                sent = yield Request(turn.index, step_no, list(history))
                self._observe(turn.index, sent)
                step_no += 1
            history.append({"role": "assistant", "content": turn.answer})

    def _observe(self, turn: int, sent: Sequence[Mapping[str, Any]]) -> None:
        self._last_turn = turn
        text: str | None = None
        for r in self._results:
            if r.gone_at is None:
                text = contents(sent) if text is None else text
                if r.content not in text:
                    r.gone_at = turn

    def live_turns(self) -> list[int]:
        """Per tool result: turns it stayed in the prompt in full (a result still there
        at the end counts the turns to the session's end)."""
        end = self._last_turn + 1
        return [(r.gone_at if r.gone_at is not None else end) - r.turn for r in self._results]


async def drive(
    agent: ScriptedAgent,
    send: Callable[[int, Request], Awaitable[Sequence[Mapping[str, Any]]]],
) -> int:
    """Run the agent to the end: ``send(index, request)`` makes the call and returns the
    messages the server received (for a refused call, the ones that were sent).
    Returns the number of calls."""
    gen = agent.calls()
    i = 0
    try:
        req = next(gen)
        while True:
            sent = await send(i, req)
            i += 1
            req = gen.send(sent)
    except StopIteration:
        return i
