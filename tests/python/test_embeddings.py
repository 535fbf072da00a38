"""`client.embeddings.create` of the official `openai` package against an embeddings server
(GGRS_EMBED_SERVER_URL: `scripts/test-python.sh` serves the tiny BERT,
`tiny/tiny-bert-f16.gguf`, with `--embeddings`), checked against llama.cpp's embeddings of the
same file (`tiny/tiny-bert-f16.public.jsonl`, GGRS_REFERENCE_DIR).

The package asks for base64 by default and decodes it; `encoding_format="float"` asks for
JSON numbers. Both must give llama.cpp's L2-normalised vectors.
"""

import json
import math
import os

import openai
import pytest

from conftest import server_kind

# ggrs equals llama.cpp's reference (made with AVX-512 summation orders, one prompt at a time)
# to its printed digits, alone or batched; llama-server built for this CPU (AVX2) differs in
# the last bits, more when it batches prompts (measured: 1.6e-4).
TOL = 1e-6 if server_kind() == "ggrs" else 1e-3


@pytest.fixture(scope="module")
def client():
    url = os.environ.get("GGRS_EMBED_SERVER_URL")
    if not url:
        pytest.skip("GGRS_EMBED_SERVER_URL is not set (scripts/test-python.sh starts one)")
    return openai.OpenAI(base_url=f"{url.rstrip('/')}/v1", api_key="no-key", max_retries=0, timeout=60)


@pytest.fixture(scope="module")
def refs():
    ref_dir = os.environ.get("GGRS_REFERENCE_DIR")
    if not ref_dir:
        pytest.skip("GGRS_REFERENCE_DIR is not set")
    with open(os.path.join(ref_dir, "tiny", "tiny-bert-f16.public.jsonl"), encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def max_diff(a, b):
    assert len(a) == len(b)
    return max(abs(x - y) for x, y in zip(a, b))


def test_one_string_is_llama_cpps_normalised_embedding(client, refs):
    r = refs[0]
    res = client.embeddings.create(model="tiny-bert", input=r["prompt"])
    assert res.object == "list"
    assert len(res.data) == 1
    d = res.data[0]
    assert d.object == "embedding" and d.index == 0
    assert len(d.embedding) == r["n_embd"] == 64
    assert max_diff(d.embedding, r["embedding_norm"]) <= TOL
    assert abs(math.sqrt(sum(x * x for x in d.embedding)) - 1.0) < 1e-5
    assert res.usage.prompt_tokens == len(r["tokens"])
    assert res.usage.total_tokens == res.usage.prompt_tokens


def test_a_list_comes_back_in_order_as_floats_and_as_base64(client, refs):
    prompts = [r["prompt"] for r in refs]
    as_b64 = client.embeddings.create(model="tiny-bert", input=prompts)
    as_float = client.embeddings.create(model="tiny-bert", input=prompts, encoding_format="float")
    for res in (as_b64, as_float):
        assert [d.index for d in res.data] == list(range(len(refs)))
        for d, r in zip(res.data, refs):
            assert max_diff(d.embedding, r["embedding_norm"]) <= TOL, r["prompt"]
        assert res.usage.prompt_tokens == sum(len(r["tokens"]) for r in refs)
    # The same f32 values either way (ggrs: the same bits whatever the batch; llama-server
    # batches the two requests' prompts differently).
    same = 0.0 if server_kind() == "ggrs" else TOL
    for a, b in zip(as_b64.data, as_float.data):
        assert max_diff(a.embedding, b.embedding) <= same


def test_token_ids_are_an_input(client, refs):
    r = refs[0]
    by_text = client.embeddings.create(model="tiny-bert", input=r["prompt"], encoding_format="float")
    by_ids = client.embeddings.create(model="tiny-bert", input=[r["tokens"]], encoding_format="float")
    assert by_ids.data[0].embedding == by_text.data[0].embedding


@pytest.mark.ggrs_only
def test_bad_input_is_a_400(client):
    # An empty string is [CLS][SEP] on BERT: an embedding, as llama-server answers it.
    empty = client.embeddings.create(model="tiny-bert", input="", encoding_format="float")
    assert len(empty.data[0].embedding) > 0
    with pytest.raises(openai.BadRequestError):
        client.embeddings.create(model="tiny-bert", input=[[]])
    with pytest.raises(openai.BadRequestError):
        client.embeddings.create(model="tiny-bert", input=["word " * 300])


@pytest.mark.ggrs_only
def test_dimensions_other_than_the_models_are_refused(client, refs):
    ok = client.embeddings.create(model="tiny-bert", input="x", dimensions=64, encoding_format="float")
    assert len(ok.data[0].embedding) == 64
    with pytest.raises(openai.BadRequestError) as err:
        client.embeddings.create(model="tiny-bert", input="x", dimensions=32)
    assert "dimensions" in str(err.value)
