"""The tiny vision models the image tests use (tests/vision_models.py),
built offline from mlx-vlm's own classes with torch-free processors: each
loads through mlx-vlm, turns an image into its image tokens, and answers
differently for a different image of the same size (so that prefix-cache
hits and misses on images can be told apart)."""

from __future__ import annotations

import pytest
from PIL import Image

from tests.vision_models import build_qwen25_vl, build_smolvlm


@pytest.fixture(scope="module", params=["qwen2_5_vl", "smolvlm"])
def vision_model(request, tmp_path_factory):
    build = {"qwen2_5_vl": build_qwen25_vl, "smolvlm": build_smolvlm}[request.param]
    return request.param, build(tmp_path_factory.mktemp(request.param) / "model")


def test_a_tiny_vision_model_reads_its_image(vision_model):
    from mlx_vlm import generate
    from mlx_vlm.utils import load

    family, path = vision_model
    model, processor = load(str(path))
    assert model.config.model_type == family
    messages = [{"role": "user", "content": [{"type": "image"},
                                             {"type": "text", "text": "What is it?"}]}]
    prompt = processor.apply_chat_template(messages, add_generation_prompt=True,
                                           tokenize=False)
    red, green = Image.new("RGB", (64, 48), (200, 30, 30)), Image.new("RGB", (64, 48),
                                                                      (20, 200, 30))
    inputs = processor(text=[prompt], images=[red], return_tensors="np")
    image_tokens = int((inputs["input_ids"] == model.config.image_token_id).sum())
    assert image_tokens == 4  # 16 patches, merged 2x2
    answers = [generate(model, processor, prompt, image=[image], max_tokens=8,
                        temperature=0.0, verbose=False).text for image in (red, green, red)]
    assert answers[0] == answers[2] != answers[1]


def test_the_model_library_marks_the_vision_models_it_serves(vision_model, tiny_model_dir):
    from engine.models.catalog import describe_folder

    family, path = vision_model
    entry = describe_folder(path)
    assert entry.problem is None and entry.family == family and entry.reads_images
    assert not describe_folder(tiny_model_dir).reads_images  # a text model
