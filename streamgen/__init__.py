"""streamgen: measure the residual cost of streaming generation (answering while the user types).

The library: no Ray, no Slurm, nothing of jobs/, workflows/ or analysis/ (docs/design.md, "Layers": which
package may import which). Each package's face (its ``__init__.py``) names its modules in a line each.

Packages:

    config/       structured configuration by concern: schemas, YAML + key=value, validate-all (the face re-exports)
    requests/     the request as the user composes it: example request, segments, chat turns (no model, no torch)
    timing/       the timing model, torch-free, shared by the live run and analysis
    results/      results identity: what a row is, which files count, the cell and its fingerprint
    models/       model loading for every family: weights, checkpoints, RoPE precision, the designed test models
    decoding/     what every decoder shares: the Decoder protocol, the plug-in shape, a rule applied to a verify forward, the meter
    families/     one folder per model family (decoder, forward rule, model code, settings) and their registry
    sizing/       sizing before a run: forwards per decode, parameters, device seconds (read by the estimate)
    benchmarks/   benchmarks as data plus a few named functions: load, render the request, segment, score
    scoring/      the sandbox, code extraction, pass@1 and token F1
    diagnostics/  a model's own decodes examined: where stream and base part, the §6.5 probe
    adapt/        adaptation to incomplete requests (paper §7): pairs, LoRA, merge
    demo/         python -m streamgen.demo: a local page that drafts while you type

Modules:

    stream.py            the paired base/stream run of one example; residual vs speculative cost
    shared_example.py    one example's base run once and every cell's stream through one tree of steps
    stream_tree.py       each distinct stream step computed once: cells fork where their rules answer differently
    live.py              the live stream run: segments arrive on an injected clock, the policy picks steps
    warmup.py            the untimed warm-up pair a model actor (and gpu_check) runs before its first timed pair
    exclusions.py        exclusion rules (paper §4): one segment before decoding, an empty answer after it
    acceptance_rules.py  acceptance rules (greedy, threshold τ) and RULES, their registry: name, parameters, per-token test, label
    try_request.py       python -m streamgen.try_request "REQUEST": one request by hand
"""

__version__ = "0.1.0"
