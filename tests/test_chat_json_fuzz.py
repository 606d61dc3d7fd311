"""Chat import fuzzed (issue 30): whatever a file holds (any structure,
numbers of every size, NaN and infinities, lone surrogates, junk where
fields go), importing it into a real database either makes a chat that reads
back, describes, exports and imports again with every setting inside the
settings row's range, or raises ImportError_ and writes nothing."""

import json

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from app.conversation.attach_files import describe_record, split_message
from app.store.chat_json import PARAMS, ROLES, ImportError_, export_chat, import_chat


class Raw(str):
    """JSON text written as is: numbers json.dumps cannot write (5,000 digits)."""


def encode(value) -> str:
    if isinstance(value, Raw):
        return str(value)
    if isinstance(value, dict):
        return "{" + ",".join(f"{json.dumps(k)}:{encode(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ",".join(map(encode, value)) + "]"
    return json.dumps(value)  # NaN and Infinity as Python writes them


def mostly(usual, *rare, one_in: int = 10):
    """`usual`, and one time in `one_in` something `rare`: most files get
    past the first checks to the later ones."""
    # Not the ends of the range: Hypothesis draws those far more often.
    return st.integers(1, one_in).flatmap(
        lambda n: st.one_of(*rare) if n == one_in // 2 else usual)


NUMBERS = st.one_of(
    st.integers(-3, 12), st.integers(), st.integers(-2 ** 80, 2 ** 80), st.floats(),
    st.floats(-1.0, 40_000.0), st.floats(0.0, 2.0),
    st.sampled_from([2 ** 31, 2 ** 53, 2 ** 53 - 1, 2 ** 63, 10 ** 400, -10 ** 400, 1000, 1001,
                     32_768, 32_769, 0.05, 2.0, 1e308, -0.0, Raw("1e400"), Raw("-1e999"),
                     Raw("1e-400"), Raw("NaN"), Raw("-Infinity"), Raw("9" * 5000)]))
TEXTS = mostly(st.text(max_size=12),
               st.sampled_from(["\ud800", "a\udfff", "\x00", '<file name="a.txt">', ""]), one_in=5)
SCALARS = st.one_of(st.none(), st.booleans(), NUMBERS, TEXTS)
JUNK = st.recursive(SCALARS, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(TEXTS, inner, max_size=4)), max_leaves=10)

SPAN = mostly(st.integers(0, 3), NUMBERS)  # where a file's block is in its message
ATTACHMENT = st.fixed_dictionaries(
    {"name": mostly(TEXTS, JUNK), "size": mostly(st.integers(0, 2 ** 60), NUMBERS),
     "start": SPAN, "end": SPAN},
    optional={"tokens": mostly(st.one_of(st.none(), st.integers(0, 2 ** 60)), NUMBERS)})
STATS = mostly(st.fixed_dictionaries({}, optional={
    "attachments": mostly(st.lists(ATTACHMENT, max_size=3), JUNK),
    "footer": st.one_of(TEXTS, JUNK), "output_tokens": NUMBERS, "ttft_s": NUMBERS,
    "thinking_s": NUMBERS, "lanes": JUNK}), JUNK)
PARAMS_ = st.dictionaries(
    st.sampled_from([*PARAMS, "answer_format", "other"]),
    mostly(st.one_of(st.integers(0, 1100), st.floats(0.0, 2.2)), NUMBERS, JUNK,
           st.fixed_dictionaries({"type": st.sampled_from(["json_object", "json_schema", "x"])},
                                 optional={"schema": st.one_of(TEXTS, JUNK)})),
    min_size=1, max_size=3)
ROLE = mostly(st.sampled_from(ROLES), JUNK, one_in=30)
CONTENT = mostly(st.text(max_size=40), TEXTS, JUNK, one_in=30)


@st.composite
def tandem_chat(draw):
    """A Tandem export, mostly well formed: ids and parents make a tree."""
    count = draw(st.integers(1, 4))
    messages = []
    for i in range(1, count + 1):
        m = {"id": i, "parent": None if i == 1 else draw(st.one_of(st.none(),
                                                                   st.integers(1, i - 1))),
             "role": draw(ROLE), "content": draw(CONTENT), "stats": draw(STATS)}
        if draw(st.integers(0, 29)) == 15:  # now and then, anything at all
            m[draw(st.sampled_from(["id", "parent", "reasoning", "complete"]))] = draw(JUNK)
        messages.append(m)
    doc = {"format": "tandem-chat", "version": 1, "messages": messages}
    for key, value in draw(st.dictionaries(mostly(
            st.sampled_from(["title", "system_prompt", "leaf"]),
            st.sampled_from(["format", "version"])), mostly(TEXTS, JUNK), max_size=2)).items():
        doc[key] = value
    doc["params"] = draw(mostly(PARAMS_, JUNK))
    return doc


PLAIN = st.lists(st.fixed_dictionaries({"role": ROLE, "content": CONTENT}, optional={
    "reasoning_content": CONTENT, "stats": STATS}), max_size=4)
FILES = mostly(tandem_chat(), PLAIN, PLAIN.map(lambda m: {"messages": m}), JUNK)


@pytest.fixture
def settings_row(qtbot):
    from app.chat.chat_settings import ChatSettings

    row = ChatSettings()
    qtbot.addWidget(row)
    return row


@settings(max_examples=300, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(doc=FILES)
def test_an_imported_file_is_a_chat_that_reads_back_or_is_refused(store, settings_row, doc):
    data = encode(doc).encode()  # json.dumps escapes lone surrogates
    before = len(store.chats())
    try:
        chat_id = import_chat(store, data)
    except ImportError_ as e:
        event(f"refused: {str(e)[:24]}")
        assert len(store.chats()) == before
        return
    event("imported")
    chat = store.chat(chat_id)
    for key, value in chat.params.items():
        if key in PARAMS:
            kind, low, high = PARAMS[key]
            assert type(value) is kind and low <= value <= high
    if any(k in PARAMS for k in chat.params):
        event("settings kept")
    settings_row.show_sampling(chat.params)
    # What an older import stored unchecked shows too, held to the row's range.
    raw = json.loads(data)
    if isinstance(raw, dict) and isinstance(raw.get("params"), dict):
        settings_row.show_sampling(raw["params"])
    for key, value in settings_row.sampling().items():
        assert PARAMS[key][1] <= value <= PARAMS[key][2]
    for m in raw.get("messages", []) if isinstance(raw, dict) else raw:
        files = m.get("stats", {}).get("attachments") if isinstance(m, dict) and \
            isinstance(m.get("stats"), dict) else None
        for f in files if isinstance(files, list) else []:
            if isinstance(f, dict):
                describe_record(f)
    for message in store.all_messages(chat_id):
        files = (message.stats or {}).get("attachments") or []
        if files:
            event("file records kept")
        for f in files:
            assert f["end"] <= len(message.content)
            describe_record(f)
        split_message(message.content, files)
    again = import_chat(store, export_chat(store, chat_id).encode("utf-8"))
    assert len(store.all_messages(again)) == len(store.all_messages(chat_id))

