"""A chat in the terminal with the model's chat template, streamed, as with llama-cpp-python.
Each turn reuses the conversation already in the KV cache (only the new turn is evaluated).

    python examples/python/chat.py [MODEL.gguf]
"""

import sys

import ggrs

model = ggrs.Model(sys.argv[1]) if len(sys.argv) > 1 else ggrs.Model.from_default(n_ctx=4096)
messages = [{"role": "system", "content": "You are a concise, helpful assistant."}]
while True:
    try:
        user = input("> ")
    except (EOFError, KeyboardInterrupt):
        break
    messages.append({"role": "user", "content": user})
    reply = ""
    try:
        for chunk in model.create_chat_completion(messages, stream=True, temperature=0.7):
            delta = chunk["choices"][0]["delta"]
            reply += delta.get("content", "")
            print(delta.get("content", ""), end="", flush=True)
    except KeyboardInterrupt:
        print(" [stopped]", end="")
    except ggrs.ContextFullError as e:
        print(f"\n{e}: starting over")
        messages = messages[:1]
        continue
    print()
    messages.append({"role": "assistant", "content": reply})
