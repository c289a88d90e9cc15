"""``python -m streamgen.demo``: a local page that drafts the answer while you type.

The browser sends the request as it grows; each completed segment (by the configured granularity)
becomes a stream step — verify, accept, regenerate — of the SAME :class:`StreamSession` the grid's
stream run uses, scheduled by the same drafting policy rule (:mod:`streamgen.timing.policies`). On submit
the server runs the final (residual) step and then the plain base decode on the same model, so the
page shows measured costs side by side. docs/demo.md describes the page and its limits.

Modules: ``settings`` (the CLI config), ``worker`` (the model's one thread), ``schedule`` (the policy
rule on live arrivals), ``session`` (one browser tab), ``manager`` (all tabs: create, find, release
idle), ``server`` (the starlette app), ``static/`` (the page), ``__main__`` (the command).
"""
