"""The configuration's vocabularies: the names a config value may take (sources, dtypes, metrics, policies,
devices) and which model fields no result depends on. The family names are :mod:`streamgen.config.families`'s
(read from the family folders); the executors are :mod:`streamgen.config.cluster`'s."""

from __future__ import annotations

MODEL_SOURCES = ("hub", "local", "gguf", "smollm2", "gemma3_270m", "tiny", "scripted")
# acceptance-rule parameters that keep a grid list of their own (their result columns are tau and tie_guard)
RULE_PARAM_LISTS = {"tau": "taus", "tie_guard": "tie_guards"}
METRICS = ("pass@1", "f1", "exact")  # a benchmark YAML's metric; an lm_eval:TASK's is the task's own
LM_EVAL_PREFIX = "lm_eval:"  # benchmarks=[lm_eval:TASK]: lm-evaluation-harness's task TASK
LM_EVAL_UNRESOLVED = "lm_eval"  # an lm_eval:TASK config's version until its task is read
DTYPES = ("float32", "bfloat16", "float16")
GRANULARITIES = ("sentence", "word", "chars")
POLICIES = ("every", "latest", "every_k", "cap")
LIVE_POLICIES = ("every", "latest", "every_k")
TYPIST_PRESETS = ("desktop", "mobile")  # streamgen.timing.typists.PRESETS (docs/typists.md)
DEVICE_NAMES = ("a100-80gb", "a6000", "h100", "h200", "cpu")  # streamgen.sizing.devices.DEVICES' keys
# ModelConfig fields no result depends on: the estimate's sizes, and what only the pre-flight checks
# (the rendered request depends on the tokenizer's template, which the snapshot commit pins).
ESTIMATE_ONLY_MODEL_FIELDS = ("parameters", "layers", "chat_template_required", "active_parameters", "experts",
                              "experts_per_token")
