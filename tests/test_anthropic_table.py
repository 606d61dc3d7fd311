"""README's Anthropic compatibility table and the code agree (issue 48):
each top-level request field /v1/messages accepts has its row (honoured or
ignored, and why), each row it refuses is refused by the code, by name. A
field added to messages_body.FIELDS without a row, or a row without the
field, fails here: new client fields are added on purpose."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from server.errors import APIError
from server.messages_body import FIELDS, parse

README = Path(__file__).parent.parent / "README.md"
STATES = {"honoured", "ignored", "refused"}


def _rows() -> dict[str, str]:
    """The request-field table's rows: field name -> its state."""
    text = README.read_text()
    section = text.split("\n## Anthropic compatibility\n", 1)[1].split("\n## ", 1)[0]
    table = section.split("| Field | Here | Why |", 1)[1].split("\n\n", 1)[0]
    rows: dict[str, str] = {}
    for line in table.strip().splitlines()[1:]:
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        assert cells[1] in STATES, line
        for name in re.findall(r"`([^`]+)`", cells[0]):
            assert name not in rows, f"{name} has two rows"
            rows[name] = cells[1]
    return rows


def test_the_readme_table_lists_exactly_the_fields_the_code_accepts():
    rows = _rows()
    accepted = {name for name, state in rows.items() if state != "refused"}
    assert accepted == FIELDS, (f"in the code, no row: {sorted(FIELDS - accepted)}; "
                                f"a row, not in the code: {sorted(accepted - FIELDS)}")


@pytest.mark.parametrize("name", sorted(n for n, s in _rows().items() if s == "refused"))
def test_a_refused_field_is_refused_by_name(name):
    body = {"model": "m", "max_tokens": 1, "messages": [{"role": "user", "content": "hi"}],
            name: {}}
    with pytest.raises(APIError) as refused:
        parse(body, {})
    assert refused.value.status == 400 and name in refused.value.message
