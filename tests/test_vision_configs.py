"""Vision models built as published ones are configured, each test its own
(issue 37): a Qwen2.5-VL with Qwen's tool template takes tools and a
continued answer beside an image, and one whose processor would take
12.8 MP reads a photo at the engine's cap of about a megapixel. The
helpers and the shared models' tests: tests/test_vision_engine.py."""

from __future__ import annotations

import pytest

from engine import Engine, EngineError, LaneSpec, load_model
from tests.test_vision_engine import RED, _asking, _greedy, _image
from tests.vision_models import build_qwen25_vl


def test_tools_and_continuing_an_answer_go_with_images(tmp_path):
    """A vision model with Qwen's tool format: tools offered beside an image
    reach its template (a chat with an earlier call and its result too); an
    answer stopped and continued writes on as the whole answer did; a tool
    definition or a continued answer that spells a control token is refused."""
    from tests.tool_models import TOOL_TOKENS
    from tests.vision_models import QWEN_VL_TOOLS

    path = build_qwen25_vl(tmp_path / "model", template=QWEN_VL_TOOLS, tokens=TOOL_TOKENS)
    engine = Engine(load_model(str(path)), lanes=[LaneSpec("cpu", "cpu", "float32")])
    try:
        assert engine.wait_ready(120)
        assert engine.capabilities.tools and engine.capabilities.images
        tools = [{"type": "function", "function": {
            "name": "get_weather", "description": "The weather in a city.",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]
        plain = engine.prepare(_asking(_image(RED)))
        offered = engine.prepare(_asking(_image(RED)), tools=tools)
        assert len(offered.prompt_ids) > len(plain.prompt_ids) + 10  # the tools shown
        done = engine.submit(offered, _greedy(6)).result(120)
        assert done.reason in ("stop", "length")
        called = _asking(_image(RED)) + [
            {"role": "assistant", "content": None, "tool_calls": [{
                "id": "c1", "type": "function",
                "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "sunny"}]
        after = engine.prepare(called, tools=tools)
        assert len(after.prompt_ids) > len(offered.prompt_ids)
        assert "Paris" in engine.tokenizer.decode(
            [i for i in after.prompt_ids if i < engine.vocab_size])

        # An answer stopped after "The picture shows" and continued: its
        # tokens follow the prompt's, and the same request again finds the
        # whole prompt, image and continued text, in the prefix cache and
        # writes the same.
        begun = "The picture shows"
        resumed = engine.prepare(_asking(_image(RED)), continue_from=begun)
        assert resumed.continue_from == begun
        assert resumed.prompt_ids == plain.prompt_ids + list(
            engine.tokenizer.encode(begun, add_special_tokens=False))
        first = engine.submit(engine.prepare(_asking(_image(RED)), continue_from=begun),
                              _greedy(6))
        assert first.result(120).reason in ("stop", "length")
        again = engine.submit(engine.prepare(_asking(_image(RED)), continue_from=begun),
                              _greedy(6))
        assert again.result(120).cached_tokens >= len(plain.prompt_ids) // 16 * 16
        assert list(again.request.output_ids) == list(first.request.output_ids)
        with pytest.raises(EngineError, match="control tokens"):
            engine.prepare(_asking(_image(RED)), tools=[{"type": "function", "function": {
                "name": "x", "description": "<|im_end|>", "parameters": {"type": "object"}}}])
        with pytest.raises(EngineError, match="control tokens"):
            engine.prepare(_asking(_image(RED)), continue_from="ok<|im_end|>")
    finally:
        engine.close()


def test_a_large_image_is_read_at_about_a_megapixel(tmp_path):
    """A processor that would take 12.8 MP (a real Qwen2.5-VL's) is handed a
    3 MP photo scaled to the engine's cap (~1 MP, 1,280 image tokens), aspect
    kept: its vision tower's memory stays bounded; the same photo is the
    same prompt (cache keys from its own digest)."""
    import io

    from PIL import Image

    from engine import decode_image
    from engine.models.vision import MODEL_MAX_PIXELS

    path = build_qwen25_vl(tmp_path / "model", max_pixels=12_845_056)
    engine = Engine(load_model(str(path)), lanes=[LaneSpec("cpu", "cpu", "float32")])
    try:
        assert engine.wait_ready(120)
        out = io.BytesIO()
        Image.new("RGB", (2000, 1500), RED).save(out, "PNG")
        photo = decode_image(out.getvalue())
        prepared = engine.prepare(_asking(photo))
        image_id = engine.model_info.model.processor.image_token_id
        tokens = prepared.vision.model_ids.count(image_id)
        assert 1000 < tokens <= MODEL_MAX_PIXELS // (28 * 28)  # not 2000x1500's 3,825
        t, h, w = prepared.vision.pixels["image_grid_thw"][0].tolist()
        assert abs(w / h - 2000 / 1500) < 0.1  # the aspect kept
        assert engine.prepare(_asking(photo)).prompt_ids == prepared.prompt_ids
        done = engine.submit(prepared, _greedy(2)).result(120)
        assert done.reason in ("stop", "length") and done.prompt_tokens == len(
            prepared.prompt_ids)
    finally:
        engine.close()
