"""Stream a reply token by token; Ctrl-C stops it cleanly.

    python examples/python/stream.py [MODEL.gguf]
"""

import sys

import ggrs

model = ggrs.Model(sys.argv[1]) if len(sys.argv) > 1 else ggrs.Model.from_default()
stream = model.generate("Once upon a time", max_tokens=256, temperature=0.8, seed=1, stream=True)
try:
    for piece in stream:
        print(piece.text, end="", flush=True)
except KeyboardInterrupt:
    print("\n[interrupted]")
else:
    g = stream.result
    print(f"\n[{len(g.tokens)} tokens, {g.timings['generated_tokens_per_second']:.1f} tokens/s]")
