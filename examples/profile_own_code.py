"""Profile your own inference code with `capture.profile` and write a trace for tracekit.

Run: python examples/profile_own_code.py [OUT]   (default OUT: own-code.json.gz)
Then: tracekit info own-code.json.gz
Builds a small random-weight Llama (no download); swap in your own model.
"""

from __future__ import annotations

import sys

import torch
from transformers import LlamaConfig, LlamaForCausalLM

from tracekit import capture


def main(out: str) -> None:
    config = LlamaConfig(
        vocab_size=512,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
    )
    torch.manual_seed(0)
    model = LlamaForCausalLM._from_config(config, attn_implementation="sdpa").eval()
    input_ids = torch.randint(3, config.vocab_size, (2, 32))
    model.generate(input_ids, max_new_tokens=4, min_new_tokens=4, do_sample=False)  # warm-up
    with capture.profile(out, metadata={"experiment": "example"}, model=model):
        model.generate(input_ids, max_new_tokens=8, min_new_tokens=8, do_sample=False)
    print(f"wrote {out}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "own-code.json.gz")
