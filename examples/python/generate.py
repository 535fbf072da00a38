"""Generate text with the default model (fetched and converted the first time).

    python examples/python/generate.py "Write a Rust function that reverses a string."
"""

import sys

import ggrs

prompt = sys.argv[1] if len(sys.argv) > 1 else "def fibonacci(n):"
model = ggrs.Model.from_default(n_ctx=2048)
out = model.generate(prompt, max_tokens=128, temperature=0)
print(out.text)
t = out.timings
print(
    f"\n[{len(out.tokens)} tokens, {t['generated_tokens_per_second']:.1f} tokens/s, "
    f"stopped by {out.stop_reason}]",
    file=sys.stderr,
)
