"""Your own sampling on NumPy logits: evaluate the prompt, then pick each token from
`model.logits()` (here: top-k 20 at temperature 0.7, with NumPy's random generator) and feed
it back with `model.eval`.

    python examples/python/logits_loop.py [MODEL.gguf]
"""

import sys

import numpy as np

import ggrs

model = ggrs.Model(sys.argv[1]) if len(sys.argv) > 1 else ggrs.Model.from_default()
rng = np.random.default_rng(1)
ids = model.tokenize("The three most important things about Rust are", special=True)
model.eval(ids)
out = []
for _ in range(48):
    logits = model.logits()  # float32, shape (n_vocab,), yours to keep
    top = np.argpartition(logits, -20)[-20:]  # the 20 most likely ids
    p = np.exp((logits[top] - logits[top].max()) / 0.7)
    token = int(rng.choice(top, p=p / p.sum()))
    if token == model.token_eos():
        break
    out.append(token)
    model.eval([token])
print(model.detokenize(out))
