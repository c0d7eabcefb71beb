#!/usr/bin/env python3
"""Writes the tokenizer the HTTP tests pair with tests/golden/qwen35_tiny (vocab 512).

A byte-level BPE trained with Hugging Face `tokenizers` on a small fixed corpus, with
Qwen's pre-tokenizer layout (regex Split + ByteLevel) and ChatML special tokens placed
so that <|im_end|> is id 1, the tiny checkpoint's eos. tokenizer_config.json carries a
ChatML chat template with Qwen3-style thinking switches (enable_thinking).
Run once and commit the outputs:  python3 tools/gen_test_tokenizer.py
"""
import json
import os

from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "http", "fixtures")
SPECIALS = ["<|endoftext|>", "<|im_end|>", "<|im_start|>", "<think>", "</think>"]
QWEN_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
              r"|\s*[\r\n]+|\s+(?!\S)|\s+")

CORPUS = [
    "The quick brown fox jumps over the lazy dog.",
    "Hello, world! How are you today? I am fine, thank you.",
    "Once upon a time there was a small model that answered questions about the weather.",
    "user assistant system The answer is 42. What is the capital of France? Paris.",
    "def main():\n    print('hello')\n    return 0\n",
    "Numbers: 1 2 3 4 5 6 7 8 9 10 100 1000. Dates: 2024-01-01.",
    "Unicode: café, naïve, über, 東京, 你好, привет, emoji 🙂🚀.",
    "Streaming servers send tokens one by one; a stop string ends the answer.",
    "Let me think about this step by step. First, we read the question carefully.",
]


def main():
    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN_SPLIT), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=512, special_tokens=SPECIALS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(CORPUS * 20, trainer=trainer)
    assert tok.token_to_id("<|im_end|>") == 1, "eos of the tiny checkpoint is id 1"
    assert tok.get_vocab_size() <= 512
    os.makedirs(OUT, exist_ok=True)
    tok.save(os.path.join(OUT, "tokenizer.json"))
    template = (
        "{%- for message in messages %}"
        "{{- '<|im_start|>' + message['role'] + '\\n' + (message['content'] or '') + '<|im_end|>\\n' }}"
        "{%- endfor %}"
        "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}"
        "{%- if enable_thinking is defined and enable_thinking is false %}{{- '<think>\\n\\n</think>\\n\\n' }}"
        "{%- elif enable_thinking is defined and enable_thinking %}{{- '<think>\\n' }}{%- endif %}"
        "{%- endif %}")
    cfg = {"model_max_length": 512, "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>",
           "bos_token": None, "tokenizer_class": "Qwen2Tokenizer", "chat_template": template,
           "added_tokens_decoder": {str(i): {"content": s, "special": True, "lstrip": False,
                                             "rstrip": False, "normalized": False, "single_word": False}
                                    for i, s in enumerate(SPECIALS)}}
    with open(os.path.join(OUT, "tokenizer_config.json"), "w") as f:
        json.dump(cfg, f, indent=1, ensure_ascii=False)
        f.write("\n")
    print("vocab", tok.get_vocab_size(), "->", os.path.normpath(OUT))


if __name__ == "__main__":
    main()
