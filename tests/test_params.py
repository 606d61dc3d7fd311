"""Sampling parameters are checked where they are made, with a clear message."""

import math

import pytest

from engine import EngineError, SamplingParams


@pytest.mark.parametrize("seed", [-1, 2**64, 2**70])
def test_seed_out_of_range_is_rejected(seed):
    with pytest.raises(EngineError, match="seed"):
        SamplingParams(seed=seed)


@pytest.mark.parametrize("seed", [0, 1, 2**64 - 1])
def test_seed_in_range_is_accepted(seed):
    assert SamplingParams(seed=seed).seed == seed


@pytest.mark.parametrize("field", ["temperature", "top_p", "min_p", "repetition_penalty"])
@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
def test_non_finite_values_are_rejected(field, value):
    with pytest.raises(EngineError, match=field):
        SamplingParams(**{field: value})


@pytest.mark.parametrize("kwargs", [dict(max_tokens=2.5), dict(top_k=1.5), dict(seed=1.0),
                                    dict(max_tokens=True), dict(repetition_context_size=0)])
def test_wrong_types_are_rejected(kwargs):
    with pytest.raises(EngineError):
        SamplingParams(**kwargs)


def test_bad_stop_strings_are_rejected():
    with pytest.raises(EngineError, match="stop"):
        SamplingParams(stop=(1, 2))
