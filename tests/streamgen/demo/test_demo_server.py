"""The demo server against the real app (starlette's TestClient), a tiny seeded model, and the real
stream session: segments become steps, the final answer is the base answer under greedy, tabs are
isolated, and every bad input is a clear message. The browser itself: tests/streamgen/demo/test_demo_browser.py."""

from __future__ import annotations

import math
import time
from pathlib import Path

import pytest

pytest.importorskip("starlette", reason="the demo needs its extra: pip install -e '.[demo]'")
pytest.importorskip("httpx", reason="starlette's TestClient needs httpx: pip install -e '.[dev]'")
from starlette.testclient import TestClient

from streamgen.config import ConfigError
from streamgen.decoding.base import draft_fingerprint
from streamgen.demo.schedule import next_prefix
from streamgen.demo.server import create_app
from streamgen.demo.settings import parse_args
from streamgen.requests.segment import segment
from streamgen.timing.policies import Policy
from tests.support.demo_support import config, tiny_decoder, user, wait_for

REPO = Path(__file__).resolve().parents[3]
REQUEST = "Write a function that adds two numbers. It should handle floats. Return the sum. Thanks."
OTHER = "Sort a list of words by length. Ties keep their order. Explain briefly."


@pytest.fixture(scope="module")
def decoder():
    return tiny_decoder(max_new_tokens=16, max_context=160)


@pytest.fixture(scope="module")
def base_tokens(decoder):
    """The plain base answer of each request, decoded here independently of the server."""
    return {t: decoder.generate(user(t)).token_ids for t in (REQUEST, OTHER)}


def client_for(decoder, **changes):
    cfg = config(**changes)  # the Host the server answers: its own address and port
    return TestClient(create_app(decoder, cfg, "tiny-llama"), base_url=f"http://{cfg.host}:{cfg.port}")


def open_session(client) -> str:
    res = client.post("/api/sessions")
    assert res.status_code == 200
    return res.json()["id"]


def type_in(client, sid: str, text: str) -> None:
    """Send the text as it grows, one sentence at a time, waiting for each completed one to be drafted."""
    segs = segment(text)
    for i in range(1, len(segs) + 1):
        res = client.post(f"/api/sessions/{sid}/text", json={"text": "".join(segs[:i])})
        assert res.status_code == 200, res.text
        assert res.json()["segments"] == i - 1  # the segment being typed is not complete yet
        wait_for(lambda i=i: i == 1 or (steps := state(client, sid)["steps"]) and steps[-1]["step"] >= i - 1,
                 what=f"prefix {i - 1} drafted")


def state(client, sid: str) -> dict:
    res = client.get(f"/api/sessions/{sid}/state")
    assert res.status_code == 200, res.text
    return res.json()


def submit_and_wait(client, sid: str, text: str) -> dict:
    assert client.post(f"/api/sessions/{sid}/submit", json={"text": text}).status_code == 200
    return wait_for(lambda: (s := state(client, sid))["status"] == "done" and s, what="the answer")


# -- the schedule rule on live arrivals ---------------------------------------------------------


@pytest.mark.parametrize("name,last,arrivals,submitted,expected", [
    ("every", 0, [], False, None),            # nothing completed yet: wait
    ("every", 0, [1.0, 2.0], False, 1),       # every: the next prefix in turn, even when stale
    ("latest", 0, [1.0, 2.0], False, 2),      # latest: the newest arrived prefix, 1 is skipped
    ("latest", 2, [1.0, 2.0], False, None),   # drafted up to what arrived: wait for more
    ("latest", 2, [1.0, 2.0, 3.0], True, 3),  # submitted: the final step
    ("every", 3, [1.0, 2.0, 3.0], True, None),  # the final step has run: nothing left
    ("every_k", 0, [1.0], False, None),       # every_2: prefix 1 is not drafted while typing
    ("every_k", 0, [1.0, 2.0, 3.0], False, 2),
    ("every_k", 2, [1.0, 2.0, 3.0], False, None),  # 3 is odd and not known to be the last
    ("every_k", 2, [1.0, 2.0, 3.0], True, 3),      # ...until the request is submitted
])
def test_next_prefix_follows_the_policy_rule(name, last, arrivals, submitted, expected):
    assert next_prefix(Policy(name, k=2), last, 5.0, arrivals, submitted) == expected


# -- one session end to end ---------------------------------------------------------------------


def test_typing_drafts_each_segment_and_the_answer_equals_the_base_answer(decoder, base_tokens):
    segs = segment(REQUEST)
    assert len(segs) == 4
    with client_for(decoder, policy="every") as client:
        sid = open_session(client)
        type_in(client, sid, REQUEST)
        typed = state(client, sid)
        assert [s["step"] for s in typed["steps"]] == [1, 2, 3]  # every: one step per completed segment
        assert typed["speculative_forwards"] == sum(s["forwards"] for s in typed["steps"])
        done = submit_and_wait(client, sid, REQUEST)
    steps, fin = done["steps"], done["finished"]
    assert [s["step"] for s in steps] == [1, 2, 3, 4] and [s["final"] for s in steps] == [False] * 3 + [True]
    # each step verified the draft the previous one left
    for before, after in zip(steps, steps[1:], strict=False):
        assert after["draft_tokens_in"] == before["accepted_tokens"] + before["generated_tokens"]
    last = steps[-1]
    assert tuple(fin["answer_tokens"]) == base_tokens[REQUEST]  # greedy is lossless
    assert tuple(fin["base_answer_tokens"]) == base_tokens[REQUEST]
    assert fin["base_forwards"] == len(base_tokens[REQUEST])  # 1 prefill + 1 per further token
    # residual: 1 verify forward (it yields the bonus token) + 1 per further generated token
    assert fin["residual_forwards"] == last["forwards"] == max(1, last["generated_tokens"])
    assert done["speculative_forwards"] == sum(s["forwards"] for s in steps[:-1])
    assert fin["wait_s"] >= fin["residual_wall_s"] > 0


@pytest.mark.parametrize("policy,drafted", [("every", [1, 2]), ("latest", [2])])
def test_a_submit_that_adds_no_segment_still_runs_the_final_step(decoder, policy, drafted):
    """Typed 'A. B. Ret' (two completed segments, drafted), then 'Ret' deleted and submitted: the submit
    adds no segment and the policy has nothing left to draft, yet the final step runs on the submitted
    text, verifying the held draft, and the answer is the base answer of that text."""
    segs = segment(REQUEST)
    submitted = "".join(segs[:2])
    with client_for(decoder, policy=policy) as client:
        sid = open_session(client)
        res = client.post(f"/api/sessions/{sid}/text", json={"text": submitted + "Ret"})
        assert res.json()["segments"] == 2
        wait_for(lambda: (s := state(client, sid)["steps"]) and s[-1]["step"] == 2, what="prefix 2 drafted")
        done = submit_and_wait(client, sid, submitted)
    steps, fin = done["steps"], done["finished"]
    assert [s["step"] for s in steps] == [*drafted, 2] and [s["final"] for s in steps] == [False] * len(drafted) + [True]
    held, final = steps[-2], steps[-1]
    assert final["segments"] == 2 and final["draft_in_id"] == held["answer_id"]  # the held draft, verified
    assert final["draft_tokens_in"] == held["accepted_tokens"] + held["generated_tokens"]
    base = decoder.generate(user(submitted)).token_ids
    assert tuple(fin["answer_tokens"]) == base == tuple(fin["base_answer_tokens"])
    assert fin["residual_forwards"] == final["forwards"] == max(1, final["generated_tokens"])


def test_an_edit_inside_drafted_text_redrafts_from_it_and_the_answer_is_the_base_answer(decoder, base_tokens):
    """Any edit anywhere (docs/typists.md, 'Corrections'): typed with a typo in sentence 1, both completed
    sentences drafted; then the typo is fixed. The session drops the segments from the edited one on and
    drafts again from prefix 1; the session's cache is kept only up to the typo, and the answer is the base
    answer of the corrected request (greedy is lossless)."""
    segs = segment(REQUEST)
    typo = REQUEST.replace("function", "functoin")
    with client_for(decoder, policy="every") as client:
        sid = open_session(client)
        client.post(f"/api/sessions/{sid}/text", json={"text": "".join(segment(typo)[:2]) + "Ret"})
        wait_for(lambda: (s := state(client, sid)["steps"]) and s[-1]["step"] == 2, what="typo prefix 2 drafted")
        res = client.post(f"/api/sessions/{sid}/text", json={"text": "".join(segs[:3]) + "Th"})
        assert res.status_code == 200 and res.json()["segments"] == 3
        wait_for(lambda: len(state(client, sid)["steps"]) == 5, what="the corrected prefixes drafted")
        done = submit_and_wait(client, sid, REQUEST)
    steps = done["steps"]
    assert [s["step"] for s in steps] == [1, 2, 1, 2, 3, 4]  # from the edited segment on, drafted again
    redraft = steps[2]  # prefix 1 corrected: its request re-fed from the typo, with the held draft
    assert redraft["draft_in_id"] == steps[1]["answer_id"]
    full = len(decoder.render(user(segs[0])))
    assert redraft["tokens_fed"] < full + redraft["draft_tokens_in"] + redraft["generated_tokens"]  # some reuse
    assert tuple(done["finished"]["answer_tokens"]) == base_tokens[REQUEST]


def test_a_submit_right_after_an_update_with_nothing_new_ends_done(decoder):
    """The race of the page's own submit: an update completes prefix 2 and the submit of the same two
    segments follows at once, while prefix 2 may still be drafting; the session must still end done."""
    segs = segment(REQUEST)
    submitted = "".join(segs[:2])
    with client_for(decoder, policy="latest") as client:
        sid = open_session(client)
        assert client.post(f"/api/sessions/{sid}/text", json={"text": submitted + "Ret"}).status_code == 200
        done = submit_and_wait(client, sid, submitted)
    assert done["steps"][-1]["final"] and done["steps"][-1]["segments"] == 2
    assert tuple(done["finished"]["answer_tokens"]) == decoder.generate(user(submitted)).token_ids


def test_of_two_submits_racing_one_is_refused(decoder):
    """Two submits of one tab both pass the first status check while the context check runs on the model
    thread; the second must then be refused (409), not register its text after the first."""
    import asyncio

    from streamgen.acceptance_rules import make_rule
    from streamgen.demo.session import DemoInputError, DemoSession, Limits
    from streamgen.demo.worker import ModelWorker
    from streamgen.requests.segment import SentenceSegmenter

    async def race() -> list[object]:
        worker = ModelWorker(decoder)
        session = DemoSession("race", worker, SentenceSegmenter(), make_rule("greedy"), Policy("latest"),
                              Limits(max_chars=2000, max_updates_per_s=20))
        try:
            out = await asyncio.gather(session.update(REQUEST, submit=True),
                                       session.update(OTHER, submit=True), return_exceptions=True)
            assert "".join(session.segments) == REQUEST  # the first submit's text, untouched
            return out
        finally:
            await session.release("test over")
            worker.close()

    first, second = asyncio.run(race())
    assert first is None and isinstance(second, DemoInputError) and second.status == 409


def test_two_sessions_keep_their_own_drafts(decoder, base_tokens):
    with client_for(decoder, policy="every") as client:
        a, b = open_session(client), open_session(client)
        assert a != b
        segs_a, segs_b = segment(REQUEST), segment(OTHER)
        for i in range(1, max(len(segs_a), len(segs_b)) + 1):  # interleaved typing
            for sid, segs in ((a, segs_a), (b, segs_b)):
                assert client.post(f"/api/sessions/{sid}/text", json={"text": "".join(segs[:i])}).status_code == 200
        done_a, done_b = submit_and_wait(client, a, REQUEST), submit_and_wait(client, b, OTHER)
    assert done_a["segments"] == len(segs_a) and done_b["segments"] == len(segs_b)
    for done in (done_a, done_b):  # every step verified its own tab's previous draft
        steps = done["steps"]
        assert [s["step"] for s in steps] == list(range(1, done["segments"] + 1))
        assert steps[0]["draft_in_id"] == draft_fingerprint(())
        assert all(after["draft_in_id"] == before["answer_id"] for before, after in zip(steps, steps[1:], strict=False))
    assert {s["answer_id"] for s in done_a["steps"]}.isdisjoint(s["answer_id"] for s in done_b["steps"])
    assert tuple(done_a["finished"]["answer_tokens"]) == base_tokens[REQUEST]
    assert tuple(done_b["finished"]["answer_tokens"]) == base_tokens[OTHER]
    assert base_tokens[REQUEST] != base_tokens[OTHER]  # else the check above could not tell them apart


# -- refusals: clear messages, never a crash ----------------------------------------------------


def test_a_flood_of_updates_is_refused_with_a_message_and_the_session_recovers(decoder):
    with client_for(decoder, max_updates_per_s=5.0) as client:
        sid = open_session(client)
        codes = [client.post(f"/api/sessions/{sid}/text", json={"text": "a" * (i + 1)}).status_code
                 for i in range(8)]
        assert codes[:5] == [200] * 5 and codes[5:] == [429] * 3  # 5 per second pass, the rest do not
        res = client.post(f"/api/sessions/{sid}/text", json={"text": "abc"})
        assert "too many updates" in res.json()["error"]
        time.sleep(1.1)
        assert client.post(f"/api/sessions/{sid}/text", json={"text": "Hello. World"}).status_code == 200
        for i in range(5):  # a new flood...
            client.post(f"/api/sessions/{sid}/text", json={"text": "Hello. World" + "!" * i})
        # ...does not block the submit: a deliberate submit is never counted as one
        assert client.post(f"/api/sessions/{sid}/submit", json={"text": "Hello. World!"}).status_code == 200


def test_a_request_longer_than_the_context_gets_a_message(decoder):
    long = "Please add these numbers together carefully. " * 40
    assert decoder.count_request_tokens(user(long)) + decoder.max_new_tokens > decoder.max_context
    with client_for(decoder, max_chars=3000) as client:
        sid = open_session(client)
        res = client.post(f"/api/sessions/{sid}/text", json={"text": long})
        assert res.status_code == 413 and "context" in res.json()["error"]
        assert state(client, sid)["steps_run"] == 0 and "context" in state(client, sid)["message"]
        res = client.post(f"/api/sessions/{sid}/submit", json={"text": long})
        assert res.status_code == 413
        too_many = client.post(f"/api/sessions/{sid}/text", json={"text": "x" * 3001})
        assert too_many.status_code == 413 and "at most 3000" in too_many.json()["error"]
        ok = client.post(f"/api/sessions/{sid}/text", json={"text": "Add two numbers. Then"})
        assert ok.status_code == 200
        wait_for(lambda: state(client, sid)["steps_run"] == 1, what="drafting after the message")
        assert state(client, sid)["message"] is None


def test_bad_requests_get_clear_errors(decoder):
    with client_for(decoder) as client:
        assert "unknown" in client.post("/api/sessions/nope/text", json={"text": "a"}).json()["error"]
        sid = open_session(client)
        assert client.post(f"/api/sessions/{sid}/text", content=b"not json").status_code == 415  # no JSON type
        assert client.post(f"/api/sessions/{sid}/text", content=b"not json",
                           headers={"Content-Type": "application/json"}).status_code == 400
        assert client.post(f"/api/sessions/{sid}/text", json={"text": 3}).status_code == 400
        assert client.post(f"/api/sessions/{sid}/submit", json={"text": "  "}).status_code == 400
        submit_and_wait(client, sid, "Add two numbers. Return the sum.")
        late = client.post(f"/api/sessions/{sid}/text", json={"text": "more"})
        assert late.status_code == 409 and "New request" in late.json()["error"]
        assert client.get("/").status_code == 200 and "textarea" in client.get("/").text
        assert client.get("/static/app.js").status_code == 200


def test_an_idle_session_is_released(decoder):
    with client_for(decoder, idle_timeout_s=0.4) as client:
        sid = open_session(client)
        app_sessions = client.app.state.manager.sessions
        session = app_sessions[sid]
        wait_for(lambda: sid not in app_sessions, 10, "the idle session to be released")
        assert session.status == "released" and "without typing" in session.message
        assert client.get(f"/api/sessions/{sid}/state").status_code == 404


def test_too_many_sessions_is_a_message(decoder):
    with client_for(decoder, max_sessions=2) as client:
        open_session(client), open_session(client)
        res = client.post("/api/sessions")
        assert res.status_code == 503 and "max_sessions=2" in res.json()["error"]


def test_bad_arguments_are_listed_together():
    with pytest.raises(ConfigError) as err:
        parse_args(["acceptance=threshold", "policy=cap", "granularity=page", "port=70000",
                    "idle_timeout_s=0"])
    text = str(err.value)
    for needle in ("tau=", "policy='cap'", "granularity='page'", "port=70000", "idle_timeout_s=0"):
        assert needle in text
    assert parse_args(["model=tiny-llama", "port=0"]).host == "127.0.0.1"
    assert math.isfinite(parse_args([]).idle_timeout_s)


def test_bad_arguments_exit_2_with_the_usage(capsys):
    from streamgen.demo.__main__ import main

    assert main(["policy=cap", "port=-1"]) == 2
    err = capsys.readouterr().err
    assert "policy='cap'" in err and "port=-1" in err and "usage: python -m streamgen.demo" in err


@pytest.mark.integration
def test_the_command_prints_a_loopback_address_and_serves(tmp_path):
    import os
    import re
    import signal
    import subprocess
    import sys
    import urllib.request

    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    proc = subprocess.Popen([sys.executable, "-m", "streamgen.demo", "model=tiny-llama", "port=0",
                             "max_new_tokens=8"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=env, cwd=tmp_path)
    try:
        line = proc.stdout.readline()
        match = re.search(r"http://127\.0\.0\.1:(\d+)/", line)
        assert match, line
        with urllib.request.urlopen(f"{match.group(0)}api/config", timeout=30) as res:
            assert b'"model":"tiny-llama"' in res.read().replace(b" ", b"")
    finally:
        proc.terminate()
        code = proc.wait(30)
    # uvicorn shuts down gracefully, then re-raises the signal it caught (its documented behaviour)
    assert code in (0, -signal.SIGTERM)
    assert "Traceback" not in proc.stdout.read()
