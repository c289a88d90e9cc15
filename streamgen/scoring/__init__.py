"""Scoring answers: the sandbox that runs model-written programs, the code extracted from chat answers, the metrics.

Modules:

    sandbox.py     execute(program, timeout_s=...) → passed / failed / timeout / error, backend recorded
    _isolation.py  sandbox backends (bwrap, unshare, rlimit-only), rlimits, per-run cgroups
    _view.py       the allow-list view of the host a program sees, rendered for bwrap and unshare
    view_etc/      the synthetic /etc files of that view (passwd, group, hosts, nsswitch.conf)
    pool.py        run_many: parallel sandboxed scoring on CPU workers, input order, retries errors
    extract.py     code from chat answers: fenced blocks, bare code, completion-only
    metrics.py     pass@1 from an execution status; normalised token-level F1
"""
