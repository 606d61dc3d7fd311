"""A base model (no chat template; its tokenizer adds BOS to raw text, as
Llama 2's does: tests/base_model.py): `tandem generate` refuses a chat
before the weights load, naming --raw; `--raw` sends the prompt as text
through the engine's raw path (BOS as the tokenizer adds it), the path
/v1/completions takes; the API's chat surfaces answer 400 naming
/v1/completions; the app refuses to load it, saying why (issue 48)."""

from __future__ import annotations

import shutil

import anthropic
import openai
import pytest

from app import cli
from app.ui.terminal import terminal_text
from engine import Engine, LaneSpec, SamplingParams
from engine.models import tokenizer_only
from engine.models.loader import load_model
from tests.base_model import BOS, build_base_model
from tests.test_cli import _run
from tests.test_server import Served

PROMPT = "hello world"


@pytest.fixture(scope="module")
def base_dir(tmp_path_factory):
    return build_base_model(tmp_path_factory.mktemp("base") / "tiny-base")


@pytest.fixture(scope="module")
def base_engine(base_dir):
    engine = Engine(load_model(str(base_dir)), lanes=[LaneSpec("cpu", "cpu", "float32")])
    assert engine.wait_ready(120)
    yield engine
    engine.close()


def _broken_copy(src, dst):
    """`src` with weights no loader can read: what loads them fails."""
    shutil.copytree(src, dst)
    (dst / "model.safetensors").write_bytes(b"not weights")
    return dst


def test_the_engine_says_it_cannot_chat_and_the_files_say_so_too(base_engine, base_dir,
                                                                 tiny_model_dir):
    assert base_engine.capabilities.chat is False
    assert tokenizer_only.declares_chat_template(str(base_dir)) is False
    assert tokenizer_only.declares_chat_template(str(tiny_model_dir)) is True
    assert tokenizer_only.declares_chat_template("default") is True  # GGUF metadata
    assert tokenizer_only.declares_chat_template(str(base_dir / "missing")) is None


def test_a_gguf_without_a_chat_template_is_told_by_its_metadata(tiny_model_dir, tmp_path,
                                                               capsys):
    """As llama.cpp's converter writes a base model: no tokenizer.chat_template."""
    import mlx.core as mx

    from engine.prompt import PromptOnly
    from tests.test_gguf import write_gguf

    path = write_gguf(tiny_model_dir, tmp_path / "chat.gguf")
    assert tokenizer_only.declares_chat_template(str(path)) is True
    weights, metadata = mx.load(str(path), return_metadata=True)
    del metadata["tokenizer.chat_template"]
    base = tmp_path / "base.gguf"
    mx.save_gguf(str(base), weights, metadata)
    assert tokenizer_only.declares_chat_template(str(base)) is False
    prompt_side = PromptOnly.load(str(base))  # the tokenizer, no weights
    assert prompt_side.capabilities.chat is False and prompt_side.context_length == 512
    assert cli.main(["generate", "--model", str(base), PROMPT]) == 2
    assert f"tandem: {base} has no chat template" in capsys.readouterr().err


def test_generate_refuses_a_chat_before_the_weights_load(base_dir, tmp_path):
    broken = _broken_copy(base_dir, tmp_path / "broken-base")
    rc, out, err = _run(["-m", "app", "generate", "--model", str(broken), PROMPT])
    assert rc == 2, err
    assert (f"tandem: {broken} has no chat template: it is a base model, which continues "
            "text rather than answering chat messages. Give --raw") in err
    assert "corrupt" not in err and "Traceback" not in err and out == ""


def test_a_base_model_its_files_did_not_tell_is_refused_once_loaded(base_dir, monkeypatch,
                                                                    capsys):
    monkeypatch.setattr(tokenizer_only, "declares_chat_template", lambda source: None)
    assert cli.main(["generate", "--model", str(base_dir), "--no-kv-cache", PROMPT]) == 2
    err = capsys.readouterr().err
    assert "has no chat template" in err and "Give --raw" in err
    assert "Cannot apply the chat template" not in err


def test_raw_sends_the_text_with_the_tokenizers_bos_as_completions_do(base_dir, base_engine):
    ids = base_engine.tokenizer.encode(PROMPT)
    assert ids[0] == base_engine.tokenizer.convert_tokens_to_ids(BOS) and len(ids) == 3
    params = SamplingParams(max_tokens=8, temperature=0.0)
    expected = base_engine.submit(base_engine.prepare_prompt(PROMPT), params,
                                  thinking=False).result(60)
    # Drafts off, as the engine here: whether a lane drafts follows measured
    # step times, and a wider verify step may round a close logit otherwise.
    rc, out, err = _run(["-m", "app", "generate", "--model", str(base_dir), "--raw",
                         "--no-kv-cache", "--draft", "off", "--temperature", "0",
                         "--max-tokens", "8", PROMPT])
    assert rc == 0, err
    assert f"prompt {len(ids)} tokens (0 cached), output {expected.output_tokens} tokens" in err
    assert out == terminal_text(expected.text) + "\n"


@pytest.mark.parametrize("argv, said", [
    (["--raw", "--system", "be brief"], "--raw sends the prompt as plain text, with no system"),
    (["--raw", "--mcp", "servers.json"], "--raw sends the prompt as plain text, and tools "
                                       "need a chat"),
    (["--list-tools"], "--list-tools lists the tools of the servers in --mcp CONFIG"),
])
def test_options_that_cannot_go_together_are_refused_first(argv, said, capsys):
    assert cli.main(["generate", "--model", "/nowhere", *argv, PROMPT]) == 2
    assert f"tandem: {said}" in capsys.readouterr().err


def test_every_chat_surface_of_the_api_is_a_400_naming_completions(base_engine):
    served = Served(base_engine)
    try:
        client, claude = served.client(), served.claude()
        hi = [{"role": "user", "content": "hi"}]
        calls = {
            "chat": lambda: client.chat.completions.create(model="tiny", messages=hi,
                                                          max_tokens=4),
            "chat stream": lambda: list(client.chat.completions.create(
                model="tiny", messages=hi, max_tokens=4, stream=True)),
            "responses": lambda: client.responses.create(model="tiny", input="hi",
                                                         max_output_tokens=4),
            "responses stream": lambda: list(client.responses.create(
                model="tiny", input="hi", max_output_tokens=4, stream=True)),
            "messages": lambda: claude.messages.create(model="tiny", max_tokens=4,
                                                       messages=hi),
            "messages stream": lambda: list(claude.messages.create(
                model="tiny", max_tokens=4, messages=hi, stream=True)),
        }
        for name, call in calls.items():
            with pytest.raises((openai.BadRequestError, anthropic.BadRequestError)) as e:
                call()
            assert e.value.status_code == 400, name
            assert "This model has no chat template" in str(e.value), name
            assert "/v1/completions" in str(e.value), name
            assert "chat_template is not set" not in str(e.value), name
        done = client.completions.create(model="tiny", prompt=PROMPT, max_tokens=4)
        assert done.usage.prompt_tokens == 3  # BOS, as the tokenizer adds it
    finally:
        served.stop()


def test_the_app_refuses_a_base_model_and_keeps_its_model(qtbot, window, base_dir, tmp_path,
                                                          monkeypatch):
    engine = window.engine
    broken = _broken_copy(base_dir, tmp_path / "broken-base")
    with qtbot.waitSignal(window.model_failed, timeout=60_000) as blocker:
        window.load_model(str(broken))  # refused before its weights are read
    assert "has no chat template" in blocker.args[0] and "cannot chat here" in blocker.args[0]
    assert "tandem generate --raw" in blocker.args[0]
    assert window.engine is engine
    assert "has no chat template" in window.statusBar().currentMessage()
    # The same once loaded, where its files did not tell.
    monkeypatch.setattr(tokenizer_only, "declares_chat_template", lambda source: None)
    with qtbot.waitSignal(window.model_failed, timeout=60_000) as blocker:
        window.load_model(str(base_dir))
    assert "has no chat template" in blocker.args[0] and window.engine is engine
    tab = window.chat_tabs()[0]
    tab.composer.setPlainText("hello world")
    tab.send()
    qtbot.waitUntil(lambda: not tab.is_streaming, timeout=60_000)
    assert tab.conversation.messages[-1]["role"] == "assistant"
