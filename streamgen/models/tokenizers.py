"""An offline, deterministic byte-level BPE tokenizer with a ChatML template, for tiny test models.

Trained in well under a second from a fixed built-in corpus with the ``tokenizers`` library, so two
processes (and two machines) build the same vocabulary. It has real merges, so re-tokenising a longer
request can move token boundaries, which is what the KV-prefix-reuse logic must survive.
"""

from __future__ import annotations

import functools
from typing import Any

CHATML_TEMPLATE = (
    "{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|im_end|>\\n' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
TINY_VOCAB_SIZE = 512

_CORPUS = (
    "Write a Python function that returns the sum of a list of integers. It should handle empty lists. "
    "Return zero when the list is empty. The function must not modify its argument.\n"
    "def add(a, b):\n    return a + b\n\n"
    "def fib(n: int) -> int:\n    if n < 2:\n        return n\n    return fib(n - 1) + fib(n - 2)\n\n"
    "for i in range(10):\n    print(i * i)\n"
    "The quick brown fox jumps over the lazy dog. Please rewrite this sentence to be more formal. "
    "Can you explain how a hash table works? What is the difference between a list and a tuple? "
    "Fix the grammar in the following paragraph. Make the text shorter and clearer. "
    "Given a string s, return the number of vowels in s. Examples: count('hello') == 2.\n"
    "import numpy as np\nimport pandas as pd\ndf = pd.DataFrame({'a': [1, 2, 3]})\n"
    "class Stack:\n    def __init__(self):\n        self.items = []\n    def push(self, x):\n"
    "        self.items.append(x)\n"
)


@functools.lru_cache(maxsize=1)
def _trained_json() -> str:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=TINY_VOCAB_SIZE,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator([_CORPUS] * 8, trainer)
    return tok.to_str()


def tiny_tokenizer() -> Any:
    """A fresh transformers tokenizer (byte-level BPE, ChatML template, EOS ``<|im_end|>``)."""
    from tokenizers import Tokenizer
    from transformers import PreTrainedTokenizerFast

    tok = PreTrainedTokenizerFast(
        tokenizer_object=Tokenizer.from_str(_trained_json()),
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
    )
    tok.chat_template = CHATML_TEMPLATE
    return tok
