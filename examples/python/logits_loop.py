"""Your own sampling on NumPy logits: evaluate the prompt, then pick each token from
`model.logits()` (here: greedy with a ban on newlines) and feed it back with `model.eval`.

    python examples/python/logits_loop.py [MODEL.gguf]
"""

import sys

import numpy as np

import ggrs

model = ggrs.Model(sys.argv[1]) if len(sys.argv) > 1 else ggrs.Model.from_default()
ids = model.tokenize("The three most important things about Rust are", special=True)
newline = set(model.tokenize("\n", add_bos=False))
model.eval(ids)
out = []
for _ in range(32):
    logits = model.logits()  # float32, shape (n_vocab,)
    logits[list(newline)] = -np.inf
    probs = np.exp(logits - logits.max())
    probs /= probs.sum()
    token = int(np.argmax(probs))
    if token == model.token_eos():
        break
    out.append(token)
    model.eval([token])
print(model.detokenize(out))
