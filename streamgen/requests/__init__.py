"""The request as the user composes it: the example request (request), its segments (segment), and the chat
vocabulary that renders history and turns (chat). Leaves: no model, no torch."""
