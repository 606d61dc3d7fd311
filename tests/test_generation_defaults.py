"""A model's own sampling defaults (engine/models/gendefaults.py): read from
generation_config.json or GGUF metadata, each field checked, falling back to
settings that keep a small model from looping; the app's new chats and the
server's requests that leave a field out use them; SamplingParams() stays
greedy."""

import json

import pytest

from engine import SamplingParams
from engine.models.gendefaults import FALLBACK, from_folder, from_gguf
from server.bodies import completion
from server.errors import APIError


def test_a_folder_s_generation_config_is_read_field_by_field(tmp_path):
    (tmp_path / "generation_config.json").write_text(json.dumps(
        {"temperature": 0.6, "top_p": 0.8, "top_k": 20, "repetition_penalty": 7.0,
         "min_p": "x"}))
    d = from_folder(tmp_path)
    assert (d.temperature, d.top_p, d.top_k) == (0.6, 0.8, 20)
    # out of range or not a number: the fallback
    assert d.repetition_penalty == FALLBACK["repetition_penalty"]
    assert d.min_p == FALLBACK["min_p"] and "generation_config" in d.source
    (tmp_path / "generation_config.json").write_text(json.dumps({"do_sample": False}))
    assert from_folder(tmp_path).temperature == 0.0  # greedy, as the model says


@pytest.mark.parametrize("content", ["{not json", "[1, 2]", json.dumps({"temperature": None})])
def test_a_missing_or_damaged_generation_config_means_tandem_s_defaults(tmp_path, content):
    assert from_folder(tmp_path).as_dict() == FALLBACK  # none at all
    (tmp_path / "generation_config.json").write_text(content)
    d = from_folder(tmp_path)
    assert d.as_dict() == FALLBACK and "Tandem" in d.source


def test_gguf_sampling_metadata_is_read():
    d = from_gguf({"general.sampling.temp": 0.3, "general.sampling.top_k": 64,
                   "general.sampling.penalty_repeat": float("nan")})
    assert (d.temperature, d.top_k) == (0.3, 64)
    assert d.repetition_penalty == FALLBACK["repetition_penalty"]


def test_the_default_model_samples_with_tandem_s_defaults_and_params_stay_greedy():
    from engine.models.loader import load_model

    loaded = load_model("default")  # its GGUF names no sampling settings
    assert loaded.generation_defaults.as_dict() == FALLBACK
    assert SamplingParams().is_greedy  # the engine's own default is unchanged


def test_server_fields_left_out_take_the_model_s_defaults():
    defaults = {"temperature": 0.6, "top_p": 0.9, "top_k": 20, "min_p": 0.02,
                "repetition_penalty": 1.05}
    body = {"messages": [{"role": "user", "content": "hi"}]}
    params = completion(body, chat=True, defaults=defaults).params
    assert (params.temperature, params.top_p, params.top_k, params.min_p,
            params.repetition_penalty) == (0.6, 0.9, 20, 0.02, 1.05)
    given = completion({**body, "temperature": 0, "top_k": 5}, chat=True,
                       defaults=defaults).params
    assert given.temperature == 0 and given.top_k == 5 and given.top_p == 0.9
    with pytest.raises(APIError) as bad:
        completion({**body, "top_k": "many"}, chat=True, defaults=defaults)
    assert bad.value.status == 400


def test_a_new_chat_follows_the_model_until_a_setting_is_changed(qtbot, window):
    tab = window.chat_tabs()[0]
    model = window.engine.generation_defaults.as_dict()  # the tiny model's: greedy
    assert tab.follows_model and window.store.chat(tab.chat_id).params == {}
    shown = tab.settings()
    assert {k: shown[k] for k in model} == pytest.approx(model)
    tab.top_k.setValue(7)  # as a user would: the chat keeps its own settings now
    stored = window.store.chat(tab.chat_id).params
    assert stored["top_k"] == 7 and not tab.follows_model
    seen = []
    real = window.engine.submit
    window.engine.submit = lambda prepared, params, **k: seen.append(params) or real(
        prepared, params, **k)
    tab.composer.setPlainText("hello world")
    tab.send()
    qtbot.waitUntil(lambda: not tab.is_streaming, timeout=60_000)
    assert seen and seen[0].top_k == 7
    assert seen[0].repetition_penalty == shown["repetition_penalty"]
    tab.model_defaults_button.click()  # back to the model's own
    assert tab.follows_model and window.store.chat(tab.chat_id).params == {}
    assert tab.top_k.value() == model["top_k"]
