"""Vision models through the engine (issue 37), for each family served: a
SmolVLM and a Qwen2.5-VL (M-RoPE: each request's positions its own) load
through mlx-vlm (engine/models/vision.py) and the lanes serve them as the
text models they run: their answers are mlx-vlm's own, token for token,
alone and in a continuous batch of different prompts, image requests
beside text ones; the memory plan counts the vision tower; a vision family
Tandem cannot run is refused naming it."""

from __future__ import annotations

import json
import shutil

import pytest

from engine import Engine, EngineError, LaneSpec, SamplingParams, load_model
from tests.vision_models import build_qwen25_vl, build_smolvlm

PROMPTS = ["the quick brown fox", "hello world, how are you today?",
           "Tandem batches chats on the CPU and the GPU.", "café 東京 🙂"]


@pytest.fixture(scope="module", params=["smolvlm", "qwen2_5_vl"])
def vision_dir(request, tmp_path_factory):
    build = {"smolvlm": build_smolvlm, "qwen2_5_vl": build_qwen25_vl}[request.param]
    return build(tmp_path_factory.mktemp(request.param) / "model")


@pytest.fixture(scope="module")
def vision_engine(vision_dir):
    engine = Engine(load_model(str(vision_dir)), lanes=[LaneSpec("cpu", "cpu", "float32")])
    assert engine.wait_ready(120)
    yield engine
    engine.close()


def _greedy(n=10) -> SamplingParams:
    return SamplingParams(max_tokens=n, temperature=0.0)


def test_a_vision_model_answers_text_as_mlx_vlm_does(vision_engine, vision_dir):
    from mlx_vlm import generate
    from mlx_vlm.utils import load

    vlm, processor = load(str(vision_dir))
    stops = vision_engine.model_info.stop_token_ids
    for text in PROMPTS:
        prepared = vision_engine.prepare([{"role": "user", "content": text}])
        handle = vision_engine.submit(prepared, _greedy())
        handle.result(120)
        ours = list(handle.request.output_ids)
        prompt = processor.tokenizer.decode(prepared.prompt_ids)
        theirs = generate(vlm, processor, prompt, max_tokens=10, temperature=0.0,
                          verbose=False).token_ids
        # The same tokens; the engine ends at any of the model's stop tokens
        # (mlx-vlm only at the config's eos).
        assert ours == theirs[:len(ours)]
        assert len(ours) == 10 or theirs[len(ours) - 1] in stops


def test_its_text_requests_batch_and_reuse_their_prefix(vision_engine):
    solo = [vision_engine.submit([{"role": "user", "content": p}], _greedy(12)).result(120)
            for p in PROMPTS]
    together = [vision_engine.submit([{"role": "user", "content": p}], _greedy(12))
                for p in PROMPTS]
    done = [h.result(120) for h in together]
    assert [d.text for d in done] == [s.text for s in solo]
    assert all(d.cached_tokens > 0 for d in done)  # the same prompts again: warm


def test_the_memory_plan_counts_the_vision_tower(vision_engine):
    from mlx.utils import tree_flatten

    vlm = vision_engine.model_info.model.vlm
    tower_module = getattr(vlm, "vision_model", None) or vlm.vision_tower
    tower = sum(a.nbytes for _, a in tree_flatten(tower_module.parameters()))
    language = sum(a.nbytes for _, a in tree_flatten(vlm.language_model.parameters()))
    assert tower > 0
    assert vision_engine.memory_plan.shared_weight_bytes >= tower + language


def test_a_vision_family_tandem_cannot_run_is_refused_by_name(vision_dir, tmp_path):
    other = tmp_path / "paligemma"
    shutil.copytree(vision_dir, other)
    config = json.loads((other / "config.json").read_text())
    config["model_type"] = "paligemma"
    (other / "config.json").write_text(json.dumps(config))
    with pytest.raises(EngineError, match="'paligemma' is a vision model Tandem cannot run"):
        load_model(str(other))


def _image(color) -> "object":
    import io

    from PIL import Image

    from engine import decode_image

    out = io.BytesIO()
    Image.new("RGB", (64, 48), color).save(out, "PNG")
    return decode_image(out.getvalue())


RED, GREEN = (200, 30, 30), (20, 200, 30)
FRESH = (10, 90, 160)  # an image no other test sends: never in the prefix cache


def _asking(image, text="What is it?") -> list[dict]:
    return [{"role": "user", "content": text, "images": [image],
             "parts": [{"type": "image", "index": 0}, {"type": "text", "text": text}]}]


def _tokens(engine, messages, n=8) -> tuple[list[int], object]:
    handle = engine.submit(engine.prepare(messages), _greedy(n))
    done = handle.result(120)
    return list(handle.request.output_ids), done


def test_an_image_request_reads_its_image_as_mlx_vlm_does(vision_engine, vision_dir):
    from mlx_vlm import generate
    from mlx_vlm.utils import load

    assert vision_engine.capabilities.images
    vlm, processor = load(str(vision_dir))
    prompt = processor.apply_chat_template(
        [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "What is it?"}]}],
        add_generation_prompt=True, tokenize=False)
    answers = {}
    for color in (RED, GREEN):
        image = _image(color)
        ours, _ = _tokens(vision_engine, _asking(image))
        theirs = generate(vlm, processor, prompt, image=[image.pixels], max_tokens=8,
                          temperature=0.0, verbose=False).token_ids
        assert ours == theirs[:len(ours)] and len(ours) > 0
        answers[color] = ours
    assert answers[RED] != answers[GREEN]


def test_the_same_image_is_a_prefix_hit_and_a_different_one_a_miss(vision_engine):
    block = vision_engine.prefix_cache.block_size
    first = vision_engine.prepare(_asking(_image(RED), "Describe the picture, please."))
    image_at = first.vision.model_ids.index(vision_engine.model_info.model.processor
                                            .image_token_id)
    _tokens(vision_engine, _asking(_image(RED), "Describe the picture, please."))
    _, again = _tokens(vision_engine, _asking(_image(RED), "Describe the picture, please."))
    assert again.cached_tokens > image_at  # past the image: its KV reused
    _, other = _tokens(vision_engine, _asking(_image(GREEN), "Describe the picture, please."))
    assert other.cached_tokens <= image_at // block * block  # only the text before it


def test_an_image_request_decodes_in_a_batch_beside_text_requests(vision_engine):
    image = _image(GREEN)
    solo = [_tokens(vision_engine, m, 12)[0] for m in (
        _asking(image, "Look."), [{"role": "user", "content": PROMPTS[0]}],
        [{"role": "user", "content": PROMPTS[3]}])]
    handles = [vision_engine.submit(vision_engine.prepare(m), _greedy(12)) for m in (
        _asking(image, "Look."), [{"role": "user", "content": PROMPTS[0]}],
        [{"role": "user", "content": PROMPTS[3]}])]
    for handle in handles:
        handle.result(120)
    assert [list(h.request.output_ids) for h in handles] == solo


def test_the_api_answers_an_image_with_a_vision_model(vision_engine):
    import base64
    import io

    from PIL import Image

    from tests.test_server import Served

    served = Served(vision_engine)
    try:
        out = io.BytesIO()
        Image.new("RGB", (64, 48), RED).save(out, "PNG")
        url = "data:image/png;base64," + base64.b64encode(out.getvalue()).decode()
        answer = served.client().chat.completions.create(model="tiny", max_tokens=8,
                                                         temperature=0, messages=[
            {"role": "user", "content": [{"type": "image_url", "image_url": {"url": url}},
                                         {"type": "text", "text": "What is it?"}]}])
        ours, done = _tokens(vision_engine, _asking(_image(RED)))
        assert answer.choices[0].message.content == done.text
        assert answer.usage.completion_tokens == len(ours)
    finally:
        served.stop()


def test_penalties_and_drafts_read_the_image_tokens_not_the_cache_keys(vision_engine):
    """A repetition penalty's window and the lookup drafter cover the image:
    they read the model's ids (the image token), never the cache keys past
    the vocabulary, and the answer is the one without drafts."""
    messages = _asking(_image(RED), "Hi")
    params = SamplingParams(max_tokens=12, temperature=0.0, repetition_penalty=1.3,
                            repetition_context_size=64)
    handle = vision_engine.submit(vision_engine.prepare(messages), params)
    done = handle.result(120)
    assert done.reason in ("stop", "length") and handle.request.output_ids
    window = handle.request.recent_ids(64)
    image_token = vision_engine.model_info.model.processor.image_token_id
    assert image_token in window and max(window) < vision_engine.vocab_size


def test_an_image_prefill_is_routed_saying_its_images(vision_engine):
    from engine import Routed

    seen = []
    unsubscribe = vision_engine.subscribe(lambda e: isinstance(e, Routed) and seen.append(e))
    try:
        handle = vision_engine.submit(vision_engine.prepare(_asking(_image(FRESH))), _greedy(2))
        handle.result(120)
    finally:
        unsubscribe()
    prefill = [e for e in seen if e.request_id == handle.request_id and e.phase == "prefill"]
    assert prefill and prefill[0].images == 1
    assert handle.request.vision.embeddings is None  # dropped once prefilled


def test_the_messages_api_reads_an_image_block(vision_engine):
    """Anthropic's image block (base64 source) through the official SDK, to
    the vision model; a URL source is refused saying why."""
    import base64
    import io

    import anthropic
    from PIL import Image

    from tests.test_server import Served

    served = Served(vision_engine)
    try:
        out = io.BytesIO()
        Image.new("RGB", (64, 48), RED).save(out, "PNG")
        claude = served.claude()
        image = {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                             "data": base64.b64encode(out.getvalue()).decode()}}
        answer = claude.messages.create(model="tiny", max_tokens=8, messages=[
            {"role": "user", "content": [image, {"type": "text", "text": "What is it?"}]}])
        _, done = _tokens(vision_engine, _asking(_image(RED)))
        assert answer.content[0].text == done.text
        with pytest.raises(anthropic.BadRequestError, match="not fetched"):
            claude.messages.create(model="tiny", max_tokens=8, messages=[{
                "role": "user", "content": [
                    {"type": "image", "source": {"type": "url",
                                                 "url": "https://example.org/a.png"}},
                    {"type": "text", "text": "?"}]}])
    finally:
        served.stop()


def test_two_images_of_different_sizes_in_one_message(vision_engine):
    """Each image's tokens keyed by its own content: two images of different
    sizes read in one message; the same two again hit the prefix cache past
    both, and swapped, the keys differ from the first image on."""
    import io

    from PIL import Image

    from engine import decode_image

    def picture(size, color):
        out = io.BytesIO()
        Image.new("RGB", size, color).save(out, "PNG")
        return decode_image(out.getvalue())

    wide, tall = picture((64, 48), RED), picture((40, 100), GREEN)

    def asking(first, second):
        return [{"role": "user", "content": "Compare them.", "images": [first, second],
                 "parts": [{"type": "image", "index": 0}, {"type": "image", "index": 1},
                           {"type": "text", "text": "Compare them."}]}]

    prepared = vision_engine.prepare(asking(wide, tall))
    assert prepared.vision.images == 2
    image_keys = [k for k in prepared.prompt_ids if k >= vision_engine.vocab_size]
    image_id = vision_engine.model_info.model.processor.image_token_id
    assert len(image_keys) == prepared.vision.model_ids.count(image_id)
    swapped = vision_engine.prepare(asking(tall, wide))
    start = prepared.prompt_ids.index(image_keys[0])
    assert swapped.prompt_ids[:start] == prepared.prompt_ids[:start]
    assert swapped.prompt_ids[start] != prepared.prompt_ids[start]
    _tokens(vision_engine, asking(wide, tall))
    _, again = _tokens(vision_engine, asking(wide, tall))
    last = max(i for i, k in enumerate(prepared.prompt_ids) if k >= vision_engine.vocab_size)
    assert again.cached_tokens >= last // 16 * 16


def test_an_image_chat_resumes_from_the_disk_tier_after_a_restart(vision_dir, tmp_path):
    """The saved-KV tier stores an image chat under the same keys as the
    prefix cache: after a restart the same image's prompt is restored past
    the image and answers as before; a different image of the same size is
    restored no further than the text before it."""
    def engine():
        e = Engine(load_model(str(vision_dir)), lanes=[LaneSpec("cpu", "cpu", "float32")],
                   kv_cache_dir=str(tmp_path / "kv"))
        assert e.wait_ready(120)
        return e

    text = "Describe the picture in a few words, please."
    first = engine()
    try:
        before, _ = _tokens(first, _asking(_image(RED), text), 8)
        prepared = first.prepare(_asking(_image(RED), text))
    finally:
        first.close()
    image_at = next(i for i, k in enumerate(prepared.prompt_ids) if k >= first.vocab_size)
    again = engine()
    from engine import Routed

    routed = []
    again.subscribe(lambda e: isinstance(e, Routed) and e.phase == "prefill"
                    and routed.append((e.request_id, e.images)))
    try:
        after, done = _tokens(again, _asking(_image(RED), text), 8)
        assert done.restored_tokens > image_at and after == before
        _, other = _tokens(again, _asking(_image(GREEN), text), 8)
        assert other.restored_tokens <= image_at
        # restored past the image: no image to encode; the other image is encoded
        assert routed == [(done.request_id, 0), (other.request_id, 1)]
    finally:
        again.close()


def test_a_follow_up_past_its_images_runs_no_vision_tower(vision_engine, vision_dir):
    """A next turn whose cached prefix holds every image embeds its new text
    alone (mlx-vlm's embedding is never asked for the pixels: no vision
    tower) and answers as a cold run of the same prompt does; the routing
    says its prefill encodes no image."""
    from engine import Routed

    first = _asking(_image(RED), "Describe the picture, please.")
    _, done = _tokens(vision_engine, first, 6)
    follow = first + [{"role": "assistant", "content": done.text},
                      {"role": "user", "content": "And its colour?"}]
    vlm = vision_engine.model_info.model.vlm
    original, pixels_embedded, routed = vlm.get_input_embeddings, [], []

    def watched(*args, **kwargs):
        pixels_embedded.append(kwargs.get("pixel_values") is not None)
        return original(*args, **kwargs)

    vlm.get_input_embeddings = watched
    unsubscribe = vision_engine.subscribe(lambda e: isinstance(e, Routed) and routed.append(e))
    try:
        warm_ids, warm = _tokens(vision_engine, follow, 8)
    finally:
        unsubscribe()
        del vlm.get_input_embeddings  # the class's own again
    prepared = vision_engine.prepare(follow)
    assert warm.cached_tokens >= max(prepared.vision.image_ends)
    assert True not in pixels_embedded
    assert [e.images for e in routed if e.request_id == warm.request_id
            and e.phase == "prefill"] == [0]
    cold = Engine(load_model(str(vision_dir)), lanes=[LaneSpec("cpu", "cpu", "float32")],
                  prefix_cache_bytes=0)
    try:
        assert cold.wait_ready(120)
        cold_ids, cold_done = _tokens(cold, follow, 8)
    finally:
        cold.close()
    assert cold_done.cached_tokens == 0 and warm_ids == cold_ids
