"""Answer while you type, live: a local page that drafts the answer as you type.

    python -m streamgen.demo                                  # SmolLM2, greedy, policy latest, 127.0.0.1:8765
    python -m streamgen.demo model=tiny-llama port=0 max_new_tokens=32
    python -m streamgen.demo acceptance=threshold tau=0.9 policy=every granularity=word

Prints the page's address once the server listens; Ctrl-C stops it. Binds 127.0.0.1 unless
``host=`` says otherwise. Every argument is a ``key=value`` field of
:class:`streamgen.demo.settings.DemoConfig`; a bad one prints one message naming the fix (exit 2).
"""

from __future__ import annotations

import logging
import socket
import sys
from collections.abc import Sequence

from streamgen.config import ConfigError, model_config
from streamgen.demo.settings import USAGE, DemoConfig, parse_args


def bind(host: str, port: int) -> socket.socket:
    """A listening socket on (host, port); port 0 picks a free one."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(64)
    return sock


def serve(cfg: DemoConfig) -> None:
    import torch

    from streamgen.demo.server import create_app
    from streamgen.demo.serving import DemoServer
    from streamgen.families.registry import load_decoder

    try:
        sock = bind(cfg.host, cfg.port)  # before loading the model: a taken port fails at once
    except OSError as exc:
        raise ConfigError([f"cannot listen on {cfg.host}:{cfg.port} ({exc}): pick another port= "
                           "(port=0: any free port)"], "cannot listen") from exc
    torch.set_num_threads(cfg.threads)
    model = model_config(cfg.model)
    decoder = load_decoder(model, device=cfg.device, max_new_tokens=cfg.max_new_tokens)
    host, port = sock.getsockname()[:2]
    app = create_app(decoder, cfg, model.name, port=port)
    server = DemoServer(app)  # ends open event streams when shutdown begins: a clean log
    print(f"streamgen demo: {model.name}, acceptance {cfg.acceptance}, policy {cfg.policy} — "
          f"open http://{host if ':' not in host else f'[{host}]'}:{port}/", flush=True)
    server.run(sockets=[sock])


def main(argv: Sequence[str] | None = None) -> int:
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    args = list(sys.argv[1:] if argv is None else argv)
    if {"-h", "--help"} & set(args):
        print(f"{__doc__}\n{USAGE}")
        return 0
    try:
        cfg = parse_args(args)
        serve(cfg)
    except ConfigError as exc:
        print(f"error: {exc}\n{USAGE}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
