"""Only the demo's own page can drive it: real HTTP requests with forged Host, Origin and body headers
against the real server (uvicorn on a loopback port), the hostile battery's cases one by one."""

from __future__ import annotations

import http.client
import json
import logging
import socket
import time
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("starlette", reason="the demo needs its extra: pip install -e '.[demo]'")
pytest.importorskip("uvicorn", reason="the demo needs its extra: pip install -e '.[demo]'")

from streamgen.demo.guard import allowed_hosts  # noqa: E402
from streamgen.demo.server import create_app, max_body  # noqa: E402
from tests.support.demo_support import ServerThread, config, tiny_decoder, wait_for  # noqa: E402

CFG = config(max_sessions=4)


@pytest.fixture(scope="module")
def server() -> Iterator[ServerThread]:
    decoder = tiny_decoder(max_new_tokens=8)
    with ServerThread(lambda port: create_app(decoder, CFG, "tiny-llama", port=port)) as srv:
        yield srv


class Reply:
    def __init__(self, res: http.client.HTTPResponse) -> None:
        self.status = res.status
        self.body = res.read()

    def json(self) -> Any:
        return json.loads(self.body)


def request(srv: ServerThread, method: str, path: str, body: bytes | None = None,
            headers: dict[str, str] | None = None) -> Reply:
    """One request with exactly these headers (``Host`` defaults to the server's own address)."""
    conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=30)
    try:
        conn.putrequest(method, path, skip_host=True, skip_accept_encoding=True)
        headers = {"Host": f"127.0.0.1:{srv.port}", **(headers or {})}
        if body is not None and "Content-Length" not in headers:
            headers["Content-Length"] = str(len(body))
        for k, v in headers.items():
            conn.putheader(k, v)
        conn.endheaders(body)
        return Reply(conn.getresponse())
    finally:
        conn.close()


def own(srv: ServerThread) -> dict[str, str]:
    return {"Origin": f"http://127.0.0.1:{srv.port}", "Content-Type": "application/json"}


OPENED: list[str] = []


def open_session(srv: ServerThread) -> str:
    res = request(srv, "POST", "/api/sessions", b"", own(srv))
    assert res.status == 200, res.body
    sid: str = res.json()["id"]
    OPENED.append(sid)
    return sid


@pytest.fixture(autouse=True)
def release_sessions(request: pytest.FixtureRequest) -> Iterator[None]:
    """Each test's sessions are closed after it, as the page does on unload (max_sessions is small)."""
    yield
    if "server" in request.fixturenames:
        srv = request.getfixturevalue("server")
        while OPENED:
            request_ = globals()["request"]
            request_(srv, "POST", f"/api/sessions/{OPENED.pop()}/release", b"", own(srv))
    OPENED.clear()


def post_text(srv: ServerThread, sid: str, body: bytes, **headers: str) -> Reply:
    return request(srv, "POST", f"/api/sessions/{sid}/text", body, {**own(srv), **headers})


def test_allowed_hosts() -> None:
    assert allowed_hosts("127.0.0.1", 80) == {"127.0.0.1:80", "localhost:80", "[::1]:80"}
    assert "example.org:80" not in allowed_hosts("0.0.0.0", 80)  # a wildcard bind answers loopback names only
    assert "[::1]:9" in allowed_hosts("::1", 9)


@pytest.mark.parametrize("host", ["evil.example:{port}", "127.0.0.1:1", "localhost", "", "127.0.0.1:{port}.evil"])
def test_foreign_host_is_refused(server: ServerThread, host: str) -> None:
    for path in ("/", "/api/config"):
        res = request(server, "GET", path, headers={"Host": host.format(port=server.port)})
        assert res.status == 421 and "answers only its own address" in res.json()["error"], res.body


@pytest.mark.parametrize("host", ["127.0.0.1:{port}", "localhost:{port}", "LOCALHOST:{port}"])
def test_own_host_is_answered(server: ServerThread, host: str) -> None:
    assert request(server, "GET", "/api/config", headers={"Host": host.format(port=server.port)}).status == 200


@pytest.mark.parametrize("headers", [{"Origin": "http://evil.example"}, {"Origin": "null"},
                                     {"Origin": "http://127.0.0.1:1"}, {"Origin": "https://127.0.0.1:{port}"},
                                     {"Sec-Fetch-Site": "cross-site"}])
def test_state_change_from_another_origin_is_refused(server: ServerThread, headers: dict[str, str]) -> None:
    forged = {k: v.format(port=server.port) for k, v in headers.items()}
    sid = open_session(server)
    for path in ("/api/sessions", f"/api/sessions/{sid}/text", f"/api/sessions/{sid}/release"):
        res = request(server, "POST", path, b'{"text": "hi"}', {"Content-Type": "application/json", **forged})
        assert res.status == 403 and "only the demo's own page" in res.json()["error"], (path, res.body)
    assert request(server, "GET", f"/api/sessions/{sid}/state").json()["status"] == "typing", "not released"


def test_another_origin_cannot_fill_the_session_slots(server: ServerThread) -> None:
    for _ in range(3 * CFG.max_sessions):
        assert request(server, "POST", "/api/sessions", b"", {"Origin": "http://evil.example"}).status == 403
    open_session(server)  # the user's own tab still gets one


def test_no_origin_is_not_a_web_page(server: ServerThread) -> None:
    sid = open_session(server)
    res = request(server, "POST", f"/api/sessions/{sid}/text", b'{"text": "Hi."}',
                  {"Content-Type": "application/json"})
    assert res.status == 200, res.body


@pytest.mark.parametrize("media", ["text/plain", "application/x-www-form-urlencoded", "multipart/form-data", None])
def test_json_only_as_application_json(server: ServerThread, media: str | None) -> None:
    sid = open_session(server)
    headers = {"Origin": f"http://127.0.0.1:{server.port}"} | ({"Content-Type": media} if media else {})
    res = request(server, "POST", f"/api/sessions/{sid}/text", b'{"text": "Hello there."}', headers)
    assert res.status == 415 and "application/json" in res.json()["error"], res.body
    ok = post_text(server, sid, b'{"text": "Hello there."}', **{"Content-Type": "application/json; charset=utf-8"})
    assert ok.status == 200


def test_declared_oversized_body_refused_before_reading(server: ServerThread) -> None:
    sid = open_session(server)
    start = time.monotonic()
    res = request(server, "POST", f"/api/sessions/{sid}/text", None,
                  {**own(server), "Content-Length": str(200 * 2**20)})  # 200 MB announced, none sent
    assert res.status == 413 and f"at most {max_body(CFG)}" in res.json()["error"]
    assert time.monotonic() - start < 10, "answered without waiting for the body"
    bad = request(server, "POST", f"/api/sessions/{sid}/text", None, {**own(server), "Content-Length": "-1"})
    assert bad.status in (400, 413)


def test_undeclared_oversized_body_refused_while_reading(server: ServerThread) -> None:
    sid = open_session(server)
    limit = max_body(CFG)
    sock = socket.create_connection(("127.0.0.1", server.port), timeout=30)
    head = (f"POST /api/sessions/{sid}/text HTTP/1.1\r\nHost: 127.0.0.1:{server.port}\r\n"
            f"Origin: http://127.0.0.1:{server.port}\r\nContent-Type: application/json\r\n"
            "Transfer-Encoding: chunked\r\n\r\n")
    sock.sendall(head.encode())
    sent = 0
    chunk = b"[" * 65536
    with _suppress_reset():
        while sent <= 4 * limit:  # the server stops reading past the limit; it never takes the whole body
            sock.sendall(b"%x\r\n%s\r\n" % (len(chunk), chunk))
            sent += len(chunk)
        sock.sendall(b"0\r\n\r\n")
    data = b""
    while b"}" not in data and (more := sock.recv(65536)):  # the JSON body follows the head
        data += more
    sock.close()
    reply = data.decode(errors="replace")
    assert reply.startswith("HTTP/1.1 413"), reply[:200]
    assert f"over {limit} bytes" in reply


class _suppress_reset:  # noqa: N801 - a tiny context manager
    """The server may close the connection once it has refused: further sends then fail."""

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: type | None, exc: BaseException | None, tb: object) -> bool:
        return kind is not None and issubclass(kind, (BrokenPipeError, ConnectionResetError))


@pytest.mark.parametrize(("body", "fragment"), [
    (b"[" * 100_000, "nested too deeply"),
    (b'{"text": "abc \\ud800 def. more"}', "U+D800"),
    (b'{"text": "abc', "not valid JSON"),
    (b'{"text": "\xff\xfe"}', "not UTF-8"),
    (b'{"text": 3}', "as a string"),
    (b'["text"]', "as a string"),
])
def test_hostile_json_is_400_with_a_message(server: ServerThread, body: bytes, fragment: str) -> None:
    sid = open_session(server)
    res = post_text(server, sid, body)
    assert res.status == 400 and fragment in res.json()["error"], res.body
    assert request(server, "GET", f"/api/sessions/{sid}/state").json()["status"] == "typing", "the tab goes on"


@pytest.mark.parametrize("text", [" ", "   \n\t ", "\u00a0 "])
def test_whitespace_only_is_an_empty_draft(server: ServerThread, text: str) -> None:
    sid = open_session(server)
    res = post_text(server, sid, json.dumps({"text": text}).encode())
    assert res.status == 200 and res.json()["segments"] == 0, res.body
    state = request(server, "GET", f"/api/sessions/{sid}/state").json()
    assert state["status"] == "typing" and not state["steps"] and not state.get("message")


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(logging.Formatter("%(name)s: %(message)s").format(record))


def test_clean_shutdown_with_an_event_stream_open() -> None:
    decoder = tiny_decoder(max_new_tokens=8)
    records = _Records()
    with ServerThread(lambda port: create_app(decoder, CFG, "tiny-llama", port=port)) as srv:
        for name in ("uvicorn", "uvicorn.error", "streamgen"):  # uvicorn's loggers do not propagate to root
            logging.getLogger(name).addHandler(records)
        sid = open_session(srv)
        sock = socket.create_connection(("127.0.0.1", srv.port), timeout=30)
        sock.sendall(f"GET /api/sessions/{sid}/events HTTP/1.1\r\nHost: 127.0.0.1:{srv.port}\r\n\r\n".encode())
        assert wait_for(lambda: b"data:" in sock.recv(65536), 30, "the first event")
        start = time.monotonic()
    took = time.monotonic() - start
    sock.close()
    for name in ("uvicorn", "uvicorn.error", "streamgen"):
        logging.getLogger(name).removeHandler(records)
    logged = "\n".join(records.lines)
    assert "CancelledError" not in logged and "Traceback" not in logged, logged
    assert took < 3, f"the open stream held the shutdown {took:.1f} s (until uvicorn's graceful timeout)"
