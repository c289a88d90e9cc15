"""The request as the user composes it: the example request (request), its segments (segment), and the chat
vocabulary that renders history and turns (chat). Leaves: no model, no torch.

Modules:

    request.py  StreamRequest: one example as the user composes it (history, segments), shared by stream.py and live.py
    segment.py  request → sentence segments (lossless; code blocks stay whole)
    chat.py     Message, one chat turn (shared by benchmarks, decoders and the stream run); render_plain for models without a chat template
"""
