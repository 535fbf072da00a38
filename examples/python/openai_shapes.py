"""Code written for llama-cpp-python runs with a changed import: `Llama` is `ggrs.Model`, and
`create_completion` / `create_chat_completion` return the same OpenAI-shaped dicts.

    python examples/python/openai_shapes.py MODEL.gguf
"""

import json
import sys

from ggrs import Llama  # was: from llama_cpp import Llama

llm = Llama(model_path=sys.argv[1], n_ctx=2048)
out = llm("Q: Name the planets in the solar system. A: ", max_tokens=48, stop=["Q:", "\n"])
print(json.dumps(out, indent=2))
chat = llm.create_chat_completion(
    messages=[{"role": "user", "content": "Describe Rust in one sentence."}], max_tokens=64
)
print(chat["choices"][0]["message"]["content"])
