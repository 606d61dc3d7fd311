"""Every cache kind through the real engine, on a tiny random model of each
family (tests/families.py): plain attention (llama, qwen2, qwen3, mistral,
phi3), sliding-window attention (gemma3_text, gpt_oss: RotatingKVCache, the
prompts are longer than the 16-token window) and a hybrid with recurrent
state (lfm2: ArraysCache). For each: greedy tokens equal mlx-lm's; alone
equals batched with joins at different steps; a warm follow-up equals a cold
one; a request moved between lanes mid-answer equals an unmoved one."""

import pytest

from engine import Engine, LaneSpec, Migrated, SamplingParams
from engine.core.router import Placement
from engine.models.loader import load_model
from tests.families import FAMILIES, build_family
from tests.helpers import TokenCounter, prompt_of, reference_greedy

TEXTS = ["hello world, how are you today? I am fine, thank you very much.",
         "the quick brown fox jumps over the lazy dog, and then the fox runs",
         "café système naïve 東京 emoji 🙂 numbers 0123456789 and more words",
         "Tandem batches chats on the CPU and the GPU. Prefill and decode."]
PLAIN = {"llama", "qwen2", "qwen3", "mistral", "phi3"}


@pytest.fixture(scope="module")
def family_dirs(tmp_path_factory):
    root = tmp_path_factory.mktemp("families")
    return {name: build_family(name, root / name) for name in FAMILIES}


@pytest.fixture
def family_engine(family_dirs):
    engines = []

    def make(name, lanes=None, **kwargs):
        loaded = load_model(str(family_dirs[name]))
        engine = Engine(loaded, lanes=lanes or [LaneSpec("cpu", "cpu", "float32")], **kwargs)
        engines.append(engine)
        return engine, loaded

    yield make
    for engine in engines:
        engine.close()


class MoveAfter:
    """Test policy: prefill on `gpu`, decode there, move to `cpu` after 6 tokens."""

    name = "move-after"

    def place(self, request, lanes):
        return Placement("gpu", "test: prefill here", decode_lane="gpu")

    def place_decode(self, request, current, lanes):
        return Placement(current, "test: decode where it prefilled")

    def reconsider(self, request, current, lanes):
        if current == "gpu" and request.output_tokens >= 6:
            return Placement("cpu", "test: move")
        return None


@pytest.mark.parametrize("name", FAMILIES)
def test_family_greedy_batched_warm_and_moved(family_engine, name):
    engine, loaded = family_engine(name)
    ids = [prompt_of(loaded, t) for t in TEXTS]
    assert all(len(p) > 16 for p in ids)  # longer than the sliding window
    alone = [reference_greedy(loaded, p, 24) for p in ids]
    # Greedy, alone and batched with joins at different steps.
    counter = TokenCounter(engine)
    handles = []
    for i, p in enumerate(ids):
        handles.append(engine.submit(prompt_ids=p, params=SamplingParams(max_tokens=24)))
        if i < len(ids) - 1:
            counter.wait_for(handles[-1].request_id, 2 + i)
    for handle, expected in zip(handles, alone):
        handle.result(60)
        assert handle.request.output_ids == expected, name
    # A warm follow-up equals a cold one (and the prefix cache says what it did).
    first = handles[1].request
    follow = ids[1] + first.output_ids + prompt_of(loaded, "and again, please?")
    warm = engine.generate(prompt_ids=follow, params=SamplingParams(max_tokens=16))
    assert list(warm.text) is not None
    expected = reference_greedy(loaded, follow, 16)
    warm_ids = engine.submit(prompt_ids=follow, params=SamplingParams(max_tokens=16))
    assert warm_ids.result(60) and warm_ids.request.output_ids == expected
    if name in PLAIN:
        assert warm.cached_tokens > 0 and warm.prefix_note is None
    else:
        assert warm.cached_tokens == 0 and "prefix cache off" in warm.prefix_note
    # Moved between lanes mid-answer: the same tokens as unmoved.
    two, _ = family_engine(name, lanes=[LaneSpec("gpu", "cpu", "float32", acts_as="gpu"),
                                        LaneSpec("cpu", "cpu", "float32")], policy=MoveAfter())
    for lane in two.lanes.values():
        lane.reconsider_every = 1
    moves = []
    two.subscribe(lambda e: moves.append(e) if isinstance(e, Migrated) else None)
    moved = two.submit(prompt_ids=ids[0], params=SamplingParams(max_tokens=24))
    moved.result(60)
    assert moved.request.output_ids == alone[0], name
    if len(alone[0]) > 8:
        assert moves and moves[0].to_lane == "cpu"


def test_a_cache_kind_tandem_cannot_batch_fails_at_load_naming_the_type(family_dirs):
    from mlx_lm.models.cache import ChunkedKVCache

    from engine import EngineError

    loaded = load_model(str(family_dirs["llama"]))
    layers = len(loaded.model.layers)
    # As llama4's chunked attention does: mlx-lm has no batch cache for it.
    loaded.model.make_cache = lambda: [ChunkedKVCache(16) for _ in range(layers)]
    with pytest.raises(EngineError, match="model type 'llama'.*ChunkedKVCache") as info:
        Engine(loaded, lanes=[LaneSpec("cpu", "cpu", "float32")])
    assert info.value.kind == "unsupported-model"
