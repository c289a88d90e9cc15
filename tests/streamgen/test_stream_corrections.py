"""The stream run over states that rewrite earlier text (corrections), on scripted models of every family.

docs/design.md, 'Accounting'; docs/typists.md, 'Corrections'. The caching families (autoregressive, ReFusion)
keep request state only up to the common token prefix of the old and new rendered requests, so:

- an edit BEFORE the cached region (a typo the step before sent, now fixed) re-feeds the request from the
  first differing token: step tokens fed = len(R_i) − cp(R_{i−1}, R_i) + draft, and cp is smaller than for
  the same step without the typo by exactly the extra tokens fed;
- an edit AFTER it (a typo in the newly arrived text) keeps the cache: cp is what it is without the typo.

The other families (LLaDA, Dream, DiffusionGemma) cache no request across steps: an edit costs nothing extra.
Every family verifies the draft against the edited request: on ``lastsegment`` (every answer token depends
on the rendered request's byte length) each step's answer is the base answer of the state it was sent.
"""

from __future__ import annotations

from itertools import accumulate

import pytest

from streamgen.acceptance_rules import Greedy
from streamgen.config import model_config
from streamgen.families.registry import load_decoder
from streamgen.live import LiveSettings, run_stream_live
from streamgen.models.scripted import SCRIPTS
from streamgen.requests.request import StreamRequest, common_prefix_length
from streamgen.stream import run_stream
from streamgen.timing.policies import Policy
from streamgen.timing.timeline import TypingModel

BUDGET = 16
SEGMENTS = ("Write a function that adds two numbers. ", "It should handle floats. ", "Use type hints.")
TEXT = "".join(SEGMENTS)
P1, P2 = SEGMENTS[0], SEGMENTS[0] + SEGMENTS[1]
# step 1 sends "functoin" (a typo inside what step 2 finds cached); step 2 fixes it
BEFORE = StreamRequest("ex", (), SEGMENTS, states=(P1.replace("function", "functoin"), P2, TEXT),
                       correction_keys=(0, 2 * 28, 0))
# step 2 sends "flaots" (a typo in the text that just arrived); step 3 fixes it
AFTER = StreamRequest("ex", (), SEGMENTS, states=(P1, P2.replace("floats", "flaots"), TEXT),
                      correction_keys=(0, 0, 2 * 20))
# any edit anywhere: step 2 deletes a word of step 1's text and inserts more than it deleted
REWRITE = StreamRequest("ex", (), SEGMENTS, states=("Write a long function that adds two numbers. ",
                                                    "Write a function that adds two numbers! It should handle",
                                                    TEXT), correction_keys=(0, 9, 0))
PLAIN = StreamRequest("ex", (), SEGMENTS)
CACHING = {"ar": "autoregressive", "refusion": "refusion"}
FAMILIES = ("ar", "refusion", "llada", "dream", "dgemma")


def decoder(family: str, behaviour: str):  # type: ignore[no-untyped-def]
    return load_decoder(model_config(f"scripted-{family}-{behaviour}"), max_new_tokens=BUDGET)


def rendered(d, request: StreamRequest, i: int) -> list[int]:  # type: ignore[no-untyped-def]
    text = getattr(d, "text", d)  # ReFusion renders with its autoregressive twin
    return text.render(request.messages(i))


def steps_with_calls(d, request: StreamRequest):  # type: ignore[no-untyped-def]
    """Each step's result and the model calls it made (kind, tokens fed)."""
    session, out, draft = d.open_stream(), [], ()
    for i in range(1, len(request.segments) + 1):
        start = len(d.meter.calls)
        result = session.step(request.messages(i), draft, Greedy())
        out.append((result, [(c.kind, c.tokens_fed) for c in d.meter.calls[start:]]))
        draft = result.answer.token_ids
    session.close()
    return out


def expected_verify_fed(d, request: StreamRequest, i: int, draft_tokens: int) -> tuple[int, int]:  # type: ignore[no-untyped-def]
    """(tokens the step's verify feeds, request tokens kept): the request after the common token prefix with
    the previous step's request (at least its last token: its logits score draft[0]), then the draft."""
    now, before = rendered(d, request, i), rendered(d, request, i - 1)
    keep = min(common_prefix_length(now, before), len(now) - 1)
    return len(now) - keep + draft_tokens, keep


@pytest.mark.parametrize("family", list(CACHING))
def test_an_edit_before_the_cached_region_refeeds_from_it(family: str) -> None:
    d = decoder(family, "constant")
    a_tokens = SCRIPTS["constant"].length + 1
    edited, plain = steps_with_calls(d, BEFORE), steps_with_calls(d, PLAIN)
    (step2, calls2), (plain2, plain_calls2) = edited[1], plain[1]
    assert (step2.draft_tokens_in, step2.accepted_tokens) == (a_tokens, a_tokens)  # the path: kept whole
    fed, keep = expected_verify_fed(d, BEFORE, 2, a_tokens)
    plain_fed, plain_keep = expected_verify_fed(d, PLAIN, 2, a_tokens)
    assert calls2[0] == ("verify" if family == "ar" else "verify_stream", fed)
    assert plain_calls2[0][1] == plain_fed
    # the typo sat inside step 1's text: the cache is cut before it, so fewer tokens are kept than without it
    assert keep < plain_keep
    assert keep <= common_prefix_length(rendered(d, BEFORE, 1), rendered(d, PLAIN, 1))  # cut at the typo or before
    assert fed - plain_fed == plain_keep - keep  # exactly what the edit invalidated, re-fed
    assert step2.answer.forwards == plain2.answer.forwards == d.min_residual_forwards
    if family == "ar":
        assert step2.extra["cached_prefix_tokens"] == keep and step2.extra["verify_tokens_fed"] == fed


@pytest.mark.parametrize("family", list(CACHING))
def test_an_edit_after_the_cached_region_keeps_the_cache(family: str) -> None:
    d = decoder(family, "constant")
    a_tokens = SCRIPTS["constant"].length + 1
    edited, plain = steps_with_calls(d, AFTER), steps_with_calls(d, PLAIN)
    fed, keep = expected_verify_fed(d, AFTER, 2, a_tokens)
    _, plain_keep = expected_verify_fed(d, PLAIN, 2, a_tokens)
    assert keep == plain_keep  # the typo lies after what step 1 cached: nothing is invalidated
    assert edited[1][1][0][1] == fed  # only the new tail (and the draft) is fed
    # step 3 fixes the typo, which step 2's request held after step 1's text: cut there, not earlier
    fed3, keep3 = expected_verify_fed(d, AFTER, 3, a_tokens)
    assert edited[2][1][0][1] == fed3
    assert keep3 >= plain_keep  # what step 2 kept of step 1's request stays cached
    assert [s.answer.forwards for s, _ in edited] == [s.answer.forwards for s, _ in plain]


@pytest.mark.parametrize("family", [f for f in FAMILIES if f not in CACHING])
def test_families_without_a_request_cache_pay_nothing_for_an_edit(family: str) -> None:
    """LLaDA, Dream and DiffusionGemma build every step's request state afresh: same forwards with or
    without the typo, and the draft is still kept whole (constant answers)."""
    d = decoder(family, "constant")
    for request in (BEFORE, AFTER, REWRITE):
        edited, plain = run_stream(d, request, Greedy()), run_stream(d, PLAIN, Greedy())
        assert [s.answer.forwards for s in edited] == [s.answer.forwards for s in plain]
        assert all(s.accepted_tokens == s.draft_tokens_in for s in edited[1:])


@pytest.mark.parametrize("family", FAMILIES)
def test_every_family_verifies_against_the_edited_request(family: str) -> None:
    """``lastsegment`` answers depend on the request's byte length: each step's answer is the base answer
    of the state that step sent (REWRITE's states differ in length from the prefixes), never the prefix's."""
    d = decoder(family, "lastsegment")
    steps = run_stream(d, REWRITE, Greedy())
    for i, step in enumerate(steps, start=1):
        assert step.answer.token_ids == d.generate(REWRITE.messages(i)).token_ids
    assert steps[0].answer.token_ids != d.generate(PLAIN.messages(1)).token_ids  # the path: states were sent


def test_a_live_run_types_the_correction_keystrokes() -> None:
    """Live, step i arrives at (prefix chars + correction keys so far) / rate — as the post-hoc arrivals —
    and each step sends its state (the scripted constant model keeps every draft whole)."""
    d = decoder("ar", "constant")
    now = [0.0]
    live = LiveSettings(Policy("every"), TypingModel(10.0))
    run = run_stream_live(d, BEFORE, Greedy(), live, clock=lambda: now[0],
                          sleep=lambda s: now.__setitem__(0, now[0] + s))
    keys = list(accumulate(BEFORE.correction_keys or ()))
    assert [t.arrival_s for t in run.timing] == [(len(BEFORE.prefix(i)) + keys[i - 1]) / 10.0 for i in (1, 2, 3)]
    assert [s.accepted_tokens for s in run.steps[1:]] == [SCRIPTS["constant"].length + 1] * 2
