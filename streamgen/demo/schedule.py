"""Which prefix to draft next when segments arrive live: the policies' own rule, on arrivals so far.

:meth:`streamgen.timing.policies.Policy.next_step` plans over a request whose segment arrivals are all
known. While the user types, the number of segments is not: the arrivals so far are followed by one
pseudo-segment arriving at +inf ("what is still to come"). A decision that lands on it means
"wait for the next segment"; once the request is submitted the pseudo-segment goes away and the
policy plans the final step exactly as the grid's live run does (every: each prefix in turn;
latest: the newest arrived prefix, skipping stale ones; every_k: every k-th, then the last).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from streamgen.timing.policies import Policy


def next_prefix(policy: Policy, last: int, now_s: float, arrivals: Sequence[float], submitted: bool) -> int | None:
    """The 1-based prefix to draft now, or None to wait; ``last`` is the last prefix drafted (0: none)."""
    planned = list(arrivals) if submitted else [*arrivals, math.inf]
    if last >= len(planned):
        return None
    decision = policy.next_step(last, now_s, planned)
    return None if math.isinf(decision.start_s) else decision.step
