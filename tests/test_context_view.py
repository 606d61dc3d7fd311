"""Which turns leave the model's view (engine/core/context_view.py, issue 52),
against a made-up length: each message costs its content's length."""

from __future__ import annotations

import pytest

from engine.core.context_view import POLICIES, fit, turns


def chat(*pairs, system="be brief") -> list[dict]:
    out = [{"role": "system", "content": system}] if system else []
    for question, answer in pairs:
        out.append({"role": "user", "content": question})
        if answer is not None:
            out.append({"role": "assistant", "content": answer})
    return out


def within(limit):
    return lambda messages: sum(len(m["content"]) for m in messages) <= limit


CONVO = chat(("q1" * 5, "a1" * 5), ("q2" * 5, "a2" * 5), ("q3" * 5, "a3" * 5),
             ("q4" * 5, None))  # 8 + 10 x 7 = 78 characters


def test_turns_split_at_user_messages_after_the_leading_system_ones():
    lead, spans = turns(CONVO)
    assert lead == 1 and spans == [(1, 3), (3, 5), (5, 7), (7, 8)]
    tools = chat(("look it up", None)) + [
        {"role": "assistant", "content": "", "tool_calls": [{"id": "c"}]},
        {"role": "tool", "content": "found"}, {"role": "assistant", "content": "it is"},
        {"role": "user", "content": "thanks"}]
    assert turns(tools) == (1, [(1, 5), (5, 6)])  # a call stays with its result
    assert turns([{"role": "assistant", "content": "hi"}, {"role": "user", "content": "x"}]) \
        == (0, [(0, 1), (1, 2)])


def test_what_fits_is_kept_whole_and_error_keeps_everything():
    assert fit(CONVO, "rolling_window", within(1000)) == (CONVO, 0)
    assert fit(CONVO, "error", within(10)) == (CONVO, 0)


def test_rolling_window_drops_the_oldest_turns_first_and_no_more_than_needed():
    view, gone = fit(CONVO, "rolling_window", within(60))
    assert gone == 2 and view == [CONVO[0]] + CONVO[3:]
    view, gone = fit(CONVO, "rolling_window", within(30))
    assert gone == 6 and view == [CONVO[0], CONVO[7]]


def test_truncate_middle_keeps_the_first_exchange():
    view, gone = fit(CONVO, "truncate_middle", within(60))
    assert gone == 2 and view == CONVO[:3] + CONVO[5:]
    view, gone = fit(CONVO, "truncate_middle", within(40))
    assert gone == 4 and view == CONVO[:3] + [CONVO[7]]


def test_what_cannot_fit_is_the_shortest_view_and_the_latest_turn_always_stays():
    view, gone = fit(CONVO, "rolling_window", within(5))
    assert view == [CONVO[0], CONVO[7]] and gone == 6  # still too long: the engine refuses
    alone = chat(("x" * 50, None))
    assert fit(alone, "truncate_middle", within(5)) == (alone, 0)


def test_an_unknown_policy_is_refused_by_name():
    assert "compact" not in POLICIES
    with pytest.raises(ValueError, match="'compact'"):
        fit(CONVO, "compact", within(5))


def test_cells_keep_the_views_start_still_while_the_chat_grows():
    """A chat growing a turn a request: without cells the view's start moves
    every request (a new prefix: nothing cached is reused); with cells it
    stays put for several requests, every view fits, and it never keeps
    fewer turns than half the limit's worth."""
    limit = 200
    grown = chat(*[(f"q{i}" + "x" * 18, f"a{i}" + "y" * 18) for i in range(40)])
    starts = {0: [], 100: []}
    for n in range(3, 81, 2):  # one more exchange a request, ending on a question
        convo = grown[:n] + [{"role": "user", "content": "now?"}]
        for cells in starts:
            view, gone = fit(convo, "rolling_window", within(limit), cell_chars=cells)
            assert within(limit)(view)
            assert gone == 0 or sum(len(m["content"]) for m in view) >= limit // 2 - 40
            if gone:
                starts[cells].append(gone)
    moves = {cells: sum(a != b for a, b in zip(got, got[1:])) for cells, got in starts.items()}
    assert moves[0] == len(starts[0]) - 1  # the fewest turns: a new start every request
    # Cells of half the limit, the chat growing 40 characters a request: a new
    # start once a cell's worth has come (every ~2.5 requests here; a real
    # chat's turn is a far smaller share of half a context).
    assert moves[100] <= len(starts[100]) // 2, starts[100]
