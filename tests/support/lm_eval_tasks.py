"""lm-eval task folders for the tests, in lm-eval's own YAML styles, pointed at local JSONL they write.

``scripted-ar-constant`` answers ``ABCDEF`` to every request (streamgen/models/scripted.py), so the
verdicts are known by design: documents whose answer is ``ABCDEF`` (even ids) score 1, the others 0.
Every question has three sentences, so every request streams (no single-segment exclusions).

- ``gsm_local``: GSM8K's shape (``Question: …\\nAnswer:``, ``#### <answer>`` targets, regex filters,
  exact_match with ``regexes_to_ignore``); zero-shot.
- ``fewshot_local``: two few-shot examples from a train split, lm-eval's default separators.
- ``chat_local``: run with ``apply_chat_template``, ``fewshot_as_multiturn`` and a system instruction
  (grid options), a description, one few-shot turn.
- ``stop_local``: ``gsm_local`` with ``until: ["DE"]``, a stop string inside the scripted answer that spans
  two of its tokens (``D``, ``E``): the decoders stop after ``ABCDE`` (tests/streamgen/decoding/test_stop_strings.py).
- ``code_local``: a code task behind ``unsafe_code`` (refused); ``hub_gsm8k``: GSM8K's own hub dataset
  (refused before any model loads).
"""

from __future__ import annotations

import json
from pathlib import Path

ANSWER = "ABCDEF"
TASKS = ("gsm_local", "fewshot_local", "chat_local")
CHAT_OPTIONS = {"apply_chat_template": True, "fewshot_as_multiturn": True,
                "system_instruction": "Reply with the code word only."}
N_DOCS = 4
STOP_UNTIL = 'until: ["DE"]'  # stop_local's generation_kwargs.until


def _docs(n: int, offset: int = 0) -> list[dict[str, str]]:
    words = [ANSWER if i % 2 == 0 else "XYZ" for i in range(n)]
    return [{"question": f"Box {i + offset} holds a card. The card shows a code word. Which word is it?",
             "answer": f"The card was read aloud.\n#### {w}", "word": w} for i, w in enumerate(words)]


GSM = """task: gsm_local
dataset_path: json
dataset_kwargs:
  data_files:
    test: {test}
output_type: generate_until
test_split: test
doc_to_text: "Question: {{{{question}}}}\\nAnswer:"
doc_to_target: "{{{{answer}}}}"
metric_list:
  - metric: exact_match
    aggregation: mean
    higher_is_better: true
    ignore_case: true
    ignore_punctuation: false
    regexes_to_ignore: [",", "\\\\$", "(?s).*#### ", "\\\\.$"]
generation_kwargs:
  until: ["Question:", "</s>", "<|im_end|>"]
  do_sample: false
  max_gen_toks: 12
num_fewshot: 0
filter_list:
  - name: "flexible-extract"
    filter:
      - function: "regex"
        group_select: -1
        regex_pattern: "([A-Z]{{3,}})"
      - function: "take_first"
  - name: "strict-match"
    filter:
      - function: "regex"
        regex_pattern: "#### ([A-Z]+)"
      - function: "take_first"
metadata:
  version: 3.0
"""

FEWSHOT = """task: {name}
dataset_path: json
dataset_kwargs:
  data_files:
    test: {test}
    train: {train}
output_type: generate_until
training_split: train
fewshot_split: train
test_split: test
{description}doc_to_text: "Q: {{{{question}}}}\\nA:"
doc_to_target: "{{{{word}}}}"
target_delimiter: " "
fewshot_delimiter: "\\n\\n"
metric_list:
  - metric: exact_match
    aggregation: mean
    higher_is_better: true
    ignore_case: true
generation_kwargs:
  until: ["\\n\\n", "Q:"]
  max_gen_toks: 12
num_fewshot: {shots}
metadata:
  version: 1.0
"""

CODE = """task: code_local
dataset_path: json
dataset_kwargs:
  data_files:
    test: {test}
output_type: generate_until
test_split: test
unsafe_code: true
doc_to_text: "{{{{question}}}}"
doc_to_target: "{{{{answer}}}}"
metric_list:
  - metric: exact_match
generation_kwargs:
  until: ["\\n\\n"]
metadata:
  version: 1.0
"""

HUB = """task: hub_gsm8k
dataset_path: openai/gsm8k
dataset_name: main
output_type: generate_until
test_split: test
doc_to_text: "Question: {{{{question}}}}\\nAnswer:"
doc_to_target: "{{{{answer}}}}"
metric_list:
  - metric: exact_match
metadata:
  version: 3.0
"""


def write_tasks(root: Path) -> Path:
    """The task folder (``lm_eval_include_path``) with the tasks above and their data; returns it."""
    tasks, data = root / "tasks", root / "data"
    tasks.mkdir(parents=True)
    data.mkdir()
    test, train = data / "test.jsonl", data / "train.jsonl"
    test.write_text("".join(json.dumps(d) + "\n" for d in _docs(N_DOCS)))
    train.write_text("".join(json.dumps(d) + "\n" for d in _docs(3, offset=100)))
    (tasks / "gsm_local.yaml").write_text(GSM.format(test=test))
    (tasks / "fewshot_local.yaml").write_text(FEWSHOT.format(name="fewshot_local", test=test, train=train,
                                                             description="", shots=2))
    (tasks / "chat_local.yaml").write_text(FEWSHOT.format(
        name="chat_local", test=test, train=train, shots=1,
        description='description: "Each box holds one card."\n'))
    (tasks / "stop_local.yaml").write_text(GSM.format(test=test).replace("task: gsm_local", "task: stop_local")
                                           .replace('until: ["Question:", "</s>", "<|im_end|>"]', STOP_UNTIL))
    (tasks / "code_local.yaml").write_text(CODE.format(test=test))
    (tasks / "hub_gsm8k.yaml").write_text(HUB.format())
    return tasks
