"""``python -m streamgen.demo``: a local page that drafts the answer while you type.

The browser sends the request as it grows; each completed segment (by the configured granularity)
becomes a stream step — verify, accept, regenerate — of the SAME :class:`StreamSession` the grid's
stream run uses, scheduled by the same drafting policy rule (:mod:`streamgen.timing.policies`). On submit
the server runs the final (residual) step and then the plain base decode on the same model, so the
page shows measured costs side by side. docs/demo.md describes the page and its limits.

Modules: ``settings`` (the CLI config), ``worker`` (the model's one thread), ``schedule`` (the policy
rule on live arrivals), ``session`` (one browser tab), ``manager`` (all tabs: create, find, release
idle), ``server`` (the starlette app), ``static/`` (the page), ``__main__`` (the command).

Modules:

    __main__.py  python -m streamgen.demo: load the model, listen on 127.0.0.1, print the address
    settings.py  DemoConfig (key=value arguments) and its validate-all
    worker.py    the model's one worker thread: model calls off the event loop, one at a time
    schedule.py  the policies' next-step rule on segments that have arrived so far
    session.py   one browser tab: completed segments → stream steps, the final step, the measured base
    manager.py   all tabs: a session per tab, lookup, idle release, session limit
    server.py    the starlette app: the page, a JSON API per session, server-sent events
    guard.py     only its own page drives it: Host allow-list, same-origin POSTs, JSON bodies under a byte limit
    serving.py   uvicorn that ends open event streams when shutdown begins (a clean log)
    static/      the page: index.html + app.js (plain HTML and JS, no build step)
"""
