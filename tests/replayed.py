"""A scripted session's model calls replayed as a harness sends them, for the tests that
drive the real gateway with one (``sakur4 demo`` replays through its scripted agent,
:mod:`sakur4.demo.agent`, instead)."""

from __future__ import annotations

from typing import Any

from sakur4.demo.scenario import Request, Session, assistant_call, tool_result


def replay(session: Session) -> list[Request]:
    """Every model call of the session, in order, each with the full history so far.

    The harness resends the whole conversation each time, as real harnesses do;
    after each call the scripted assistant output is appended, not the model's.
    """
    history: list[dict[str, Any]] = [{"role": "system", "content": session.system}]
    calls: list[Request] = []
    for turn in session.turns:
        user = turn.user if not turn.pin else f"{turn.pin}\n\n{turn.user}"
        history.append({"role": "user", "content": user})
        calls.append(Request(turn.index, 0, list(history), turn.pin))
        for i, step in enumerate(turn.steps, 1):
            history.append(assistant_call(step))
            history.append(tool_result(step))
            calls.append(Request(turn.index, i, list(history)))
        history.append({"role": "assistant", "content": turn.answer})
    return calls
