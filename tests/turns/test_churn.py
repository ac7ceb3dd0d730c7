"""Cache churn between turns: the known cases repaired, the rest reported."""

from __future__ import annotations

from sakur4.turns.churn import classify, drop_billing_header, repair_messages

HEADER = "x-anthropic-billing-header: cc_version=2.1.332.a1b; cc_entrypoint=sdk-cli; cch=3f9a2;"


def test_billing_header_is_dropped_from_joined_system_blocks() -> None:
    # Claude Code 2.1.332 sends the header as its own block; the blocks join with nothing.
    kept, dropped = drop_billing_header(HEADER + "You are Claude Code.\nMore.")
    assert kept == "You are Claude Code.\nMore."
    assert dropped == HEADER


def test_billing_header_without_a_hash_and_on_its_own_line() -> None:
    header = "x-anthropic-billing-header: cc_version=2.1.332.0b8; cc_entrypoint=sdk-cli;"
    kept, dropped = drop_billing_header(header + "\nYou are a Claude agent.")
    assert kept == "You are a Claude agent."
    assert dropped == header + "\n"


def test_a_system_without_the_header_is_untouched() -> None:
    assert drop_billing_header("You are helpful.") == ("You are helpful.", None)
    text = "intro x-anthropic-billing-header: cc_version=1; rest"
    assert drop_billing_header(text) == (text, None)


def _turn(reminder: str, *later: dict[str, str]) -> list[dict[str, str]]:
    return [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": f"Fix the bug.\n<system-reminder>{reminder}</system-reminder>"},
        {"role": "assistant", "content": "Done."},
        *later,
    ]


def test_a_rewritten_reminder_keeps_the_prefix_and_moves_to_the_tail() -> None:
    sent = _turn("3 files open")
    new = _turn("4 files open", {"role": "user", "content": "Thanks. Now the docs."})
    r = repair_messages(new, sent)
    assert r.messages[:3] == sent  # the prefix as sent last turn
    assert r.messages[3]["content"] == (
        "Thanks. Now the docs.\n\n<system-reminder>4 files open</system-reminder>"
    )
    (change,) = r.changes
    assert (change.kind, change.message, change.repaired) == ("system-reminder", 1, True)
    assert change.offset == len("Fix the bug.\n<system-reminder>")
    assert (change.before, change.after) == ("3", "4")


def test_the_moved_reminder_stays_put_on_the_next_turn() -> None:
    first = repair_messages(_turn("4", {"role": "user", "content": "Next."}), _turn("3"))
    harness = _turn("5", {"role": "user", "content": "Next."}, {"role": "user", "content": "More."})
    again = repair_messages(harness, first.messages)
    assert again.messages[:4] == first.messages
    assert again.messages[4]["content"].endswith("<system-reminder>5</system-reminder>")


def test_a_removed_reminder_is_kept_as_the_model_saw_it() -> None:
    sent = _turn("only now")
    new = [
        *sent[:1],
        {"role": "user", "content": "Fix the bug.\n"},
        sent[2],
        {"role": "user", "content": "Go"},
    ]
    r = repair_messages(new, sent)
    assert r.messages[:3] == sent
    assert r.messages[3] == {"role": "user", "content": "Go"}
    assert r.changes[0].repaired


def test_other_changes_are_reported_not_rewritten() -> None:
    sent = [
        {"role": "system", "content": "Now: 2026-12-01 19:00"},
        {"role": "user", "content": "a"},
    ]
    new = [{"role": "system", "content": "Now: 2026-12-01 19:05"}, {"role": "user", "content": "a"}]
    r = repair_messages(new, sent)
    assert r.messages == new
    (change,) = r.changes
    assert (change.kind, change.repaired, change.message) == ("timestamp", False, 0)
    edited = [{"role": "system", "content": "Be kind."}, {"role": "user", "content": "a"}]
    assert repair_messages(edited, sent).changes[0].kind == "unknown"


def test_reminder_repair_can_be_switched_off() -> None:
    new = _turn("4", {"role": "user", "content": "x"})
    r = repair_messages(new, _turn("3"), repairs=())
    assert r.messages == new
    assert [(c.kind, c.repaired) for c in r.changes] == [("system-reminder", False)]


def test_no_tail_to_deliver_to_means_no_repair() -> None:
    new = _turn("4", {"role": "assistant", "content": "prefill"})
    r = repair_messages(new, _turn("3"))
    assert r.messages == new
    assert not r.changes[0].repaired


def test_a_first_turn_has_nothing_to_compare() -> None:
    assert repair_messages(_turn("3"), None).changes == ()


def test_classify_sees_the_billing_hash() -> None:
    a, b = HEADER + "x", HEADER.replace("3f9a2", "77777") + "x"
    offset = a.index("3f9a2")
    assert classify(a, b, offset) == "billing-header"


def test_the_last_message_is_the_tail_itself_and_is_never_pinned() -> None:
    # A retry whose last message got a new reminder: nothing after it to protect.
    sent = _turn("3", {"role": "user", "content": "Go <system-reminder>a</system-reminder>"})
    new = _turn("3", {"role": "user", "content": "Go <system-reminder>b</system-reminder>"})
    r = repair_messages(new, sent)
    assert r.messages == new
    assert [(c.kind, c.message, c.repaired) for c in r.changes] == [("system-reminder", 3, False)]


def test_only_the_reminders_new_in_a_message_move() -> None:
    a = "<system-reminder>kept</system-reminder>"
    b = "<system-reminder>new</system-reminder>"
    sent = [{"role": "user", "content": f"Do it. {a}"}, {"role": "assistant", "content": "ok"}]
    new = [
        {"role": "user", "content": f"Do it. {a} {b}"},
        {"role": "assistant", "content": "ok"},
        {"role": "user", "content": "next"},
    ]
    r = repair_messages(new, sent)
    assert r.messages[2]["content"] == f"next\n\n{b}"
