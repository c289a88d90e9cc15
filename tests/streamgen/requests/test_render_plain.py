"""The plain transcript a model without a chat template gets (streamgen.requests.chat.render_plain)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from streamgen.requests.chat import render_plain

TEXT = st.text(alphabet="abc .\n", max_size=20)


def test_the_documented_layout() -> None:
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi."},
                {"role": "assistant", "content": "Hello."}, {"role": "user", "content": "Add 2 and 3."}]
    assert render_plain(messages) == "Be brief.\n\nUser: Hi.\n\nAssistant: Hello.\n\nUser: Add 2 and 3.\n\nAssistant:"


@given(TEXT, TEXT, TEXT)
def test_a_growing_request_keeps_the_rendering_before_it(system: str, first: str, more: str) -> None:
    """What the stream run's prefix reuse relies on: only the tail after the request text changes."""
    short = render_plain([{"role": "system", "content": system}, {"role": "user", "content": first}])
    long = render_plain([{"role": "system", "content": system}, {"role": "user", "content": first + more}])
    head = short.removesuffix("\n\nAssistant:")
    assert long.startswith(head) and long.endswith("\n\nAssistant:")


def test_an_unknown_role_is_an_error() -> None:
    with pytest.raises(ValueError, match="role 'tool'"):
        render_plain([{"role": "tool", "content": "x"}])
