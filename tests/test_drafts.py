"""Draft proposals and how many to propose (engine/core/drafts.py): plain
Python, no model. Costs in these tests are the ones issue 32 measured on this
machine for a lone request (61 ms for 1 position, 80 for 5, 97 for 9)."""

from __future__ import annotations

import random

import pytest

from engine.core.drafts import DraftPolicy, LookupDrafter, expected_tokens


def _brute(tokens: list[int], k: int, min_n: int, max_n: int) -> list[int]:
    """The proposal by scanning: the longest suffix n-gram's latest earlier
    occurrence (one whose follower is known), what followed it."""
    for n in range(min(max_n, len(tokens)), min_n - 1, -1):
        suffix = tokens[-n:]
        for start in range(len(tokens) - n - 1, -1, -1):
            if tokens[start:start + n] == suffix:
                return tokens[start + n:start + n + k]
    return []


def test_a_copied_paragraph_is_proposed_from_the_prompt():
    paragraph = [11, 12, 13, 14, 15, 16, 17, 18, 19, 20]
    prompt = [1, 2, *paragraph, 3, 4]
    drafter = LookupDrafter(prompt)
    assert drafter.propose(5) == []  # the answer has not started copying
    drafter.extend([11, 12])
    assert drafter.propose(5) == [13, 14, 15, 16, 17]
    drafter.extend([13, 14, 15, 16, 17, 18, 19, 20])
    # What followed the paragraph in the prompt: its end, then this answer's start.
    assert drafter.propose(5) == [3, 4, 11, 12, 13]


def test_the_index_agrees_with_a_scan_on_random_text():
    rng = random.Random(4)
    for trial in range(200):
        vocab = rng.choice([3, 5, 20])
        tokens = [rng.randrange(vocab) for _ in range(rng.randrange(1, 60))]
        split = rng.randrange(len(tokens) + 1)
        drafter = LookupDrafter(tokens[:split], min_n=1 + trial % 2, max_n=3)
        drafter.extend(tokens[split:])
        k = rng.randrange(1, 6)
        assert drafter.propose(k) == _brute(tokens, k, 1 + trial % 2, 3), (tokens, k)


def test_fresh_text_proposes_nothing():
    drafter = LookupDrafter(list(range(100)))
    drafter.extend([500, 501, 502])
    assert drafter.propose(8) == []
    assert drafter.propose(0) == []


def test_a_predicted_output_leads_while_the_answer_agrees_with_it():
    prediction = [40, 41, 42, 43, 44, 45, 46]
    drafter = LookupDrafter([1, 2, 3], prediction=prediction)
    assert drafter.propose(3) == [40, 41, 42]  # before the first token
    drafter.extend([40, 41])
    assert drafter.propose(3) == [42, 43, 44]
    drafter.extend([99, 43, 44])  # it wrote something else, then came back to it
    assert drafter.propose(3) == [45, 46]


def test_expected_tokens():
    assert expected_tokens(0.0, 5) == 1.0
    assert expected_tokens(1.0, 5) == 6.0
    assert expected_tokens(0.5, 2) == pytest.approx(1.75)


def _measured(k: int) -> float:
    """A lone request here: 61 ms for one position, 80 for five, 97 for nine."""
    return 0.061 + 0.0045 * k


def test_k_follows_acceptance_and_cost():
    assert DraftPolicy(acceptance=0.9).next_k(8, _measured) == 8
    assert DraftPolicy(acceptance=0.9).next_k(3, _measured) == 3  # only 3 proposed
    assert DraftPolicy(acceptance=0.05).next_k(8, _measured) == 0
    # A wide step that costs as much as the tokens it may save: none.
    assert DraftPolicy(acceptance=0.5).next_k(8, lambda k: 0.061 * (1 + k)) == 0


def test_acceptance_is_learned_from_verified_proposals():
    policy = DraftPolicy(acceptance=0.6)
    for _ in range(20):
        policy.record(8, 8)
    assert policy.acceptance > 0.95 and policy.drafted == policy.accepted == 160
    for _ in range(20):
        policy.record(8, 0)
    assert policy.acceptance < 0.05


def test_drafts_that_stop_paying_rest_then_try_again():
    policy = DraftPolicy(acceptance=0.02, patience=3, rest=5)
    ks = []
    for _ in range(12):
        if policy.resting:  # a plain step
            policy.rest_step()
            ks.append(None)
        else:
            ks.append(policy.next_k(8, _measured))
    # Three steps where no k pays, five plain ones, then one small try.
    assert ks[:3] == [0, 0, 0]
    assert ks[3:8] == [None] * 5 and ks[8] == 1
    policy.record(1, 1)  # the try was accepted: the estimate rises
    assert policy.acceptance > 0.02
