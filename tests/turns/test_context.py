"""The turn pipeline's parts take one context object (issue 38 item 5): none of them
takes the settings, the store, its calls, the client or the sessions' book apart."""

from __future__ import annotations

import inspect

import pytest

from sakur4.turns.context import TurnContext
from sakur4.turns.parking import SlotScheduler
from sakur4.turns.prepare import Preparer
from sakur4.turns.send import Sender
from sakur4.turns.watch import BackendWatch

SHARED = {"settings", "store", "calls", "client", "sessions"}


@pytest.mark.parametrize("part", [BackendWatch, Preparer, SlotScheduler, Sender])
def test_each_part_takes_the_context_and_nothing_it_holds(part: type) -> None:
    params = inspect.signature(part.__init__, eval_str=True).parameters
    names = [n for n in params if n != "self"]
    assert names[0] == "ctx", names
    assert params["ctx"].annotation is TurnContext
    assert not SHARED & set(names), f"{part.__name__} takes {SHARED & set(names)} apart"
