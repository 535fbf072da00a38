"""Embeddings from Python on the tiny BERT (WordPiece, mean pooling): `Model.embed` against
llama.cpp's reference vectors, the pooling and normalisation options, llama-cpp-python's
`create_embedding` shape, and the errors of an embedding-only model."""

from __future__ import annotations

import numpy as np
import pytest

import ggrs

from conftest import read_jsonl

# Largest |ggrs − llama.cpp| per value allowed (the Rust test's bound,
# ggrs-llama/tests/tiny_bert.rs; llama.cpp prints 6 decimals).
TOL = 5e-4


@pytest.fixture(scope="module")
def bert_path(ref_dir):
    return str(ref_dir / "tiny" / "tiny-bert-f16.gguf")


@pytest.fixture(scope="module")
def refs(ref_dir):
    return read_jsonl(ref_dir / "tiny" / "tiny-bert-f16.public.jsonl")


@pytest.fixture(scope="module")
def bert(bert_path):
    with ggrs.Model(bert_path, n_threads=2) as m:
        yield m


def test_an_embedding_model_loads_without_a_session(bert):
    assert bert.arch == "bert"
    assert bert.pooling == "mean"
    assert bert.n_embd == 64
    assert bert.n_ctx == 128
    assert bert.n_tokens == 0
    with pytest.raises(ggrs.ModelError, match="embeddings only"):
        bert.generate("hi", max_tokens=1)
    with pytest.raises(ggrs.ModelError, match="embed"):
        bert.eval([101, 102])


def test_embed_matches_llama_cpp(bert, refs):
    prompts = [r["prompt"] for r in refs]
    raw = bert.embed(prompts, normalize=False)
    unit = bert.embed(prompts)
    assert isinstance(raw, np.ndarray) and raw.dtype == np.float32
    assert raw.shape == (len(prompts), 64)
    for i, r in enumerate(refs):
        assert np.max(np.abs(raw[i] - np.array(r["embedding"]))) <= TOL, i
        assert np.max(np.abs(unit[i] - np.array(r["embedding_norm"]))) <= TOL, i
        assert abs(float(np.linalg.norm(unit[i])) - 1.0) < 1e-5
    # One str gives one vector, equal to its row of the batch bit for bit.
    one = bert.embed(prompts[3], normalize=False)
    assert one.shape == (64,)
    assert np.array_equal(one, raw[3])
    # Token ids as input; llama.cpp's normalisation numbers.
    ids = bert.embed([refs[0]["tokens"]], normalize=-1)
    assert np.array_equal(ids[0], raw[0])
    taxicab = bert.embed(prompts[0], normalize=1)
    assert abs(float(np.abs(taxicab).sum()) - 1.0) < 1e-5


def test_poolings(bert, refs):
    text = refs[0]["prompt"]
    rows = bert.embed([text], pooling="none", normalize=False)
    assert isinstance(rows, list) and rows[0].shape == (len(refs[0]["tokens"]), 64)
    mean = bert.embed(text, normalize=False)
    assert np.max(np.abs(rows[0].mean(axis=0) - mean)) < 1e-5
    cls = bert.embed(text, pooling="cls", normalize=False)
    assert np.array_equal(cls, rows[0][0])
    last = bert.embed(text, pooling="last", normalize=False)
    assert np.array_equal(last, rows[0][-1])
    # Back to the file's pooling.
    assert np.array_equal(bert.embed(text, normalize=False), mean)


def test_create_embedding_has_llama_cpp_pythons_shape(bert, refs):
    texts = [refs[0]["prompt"], refs[2]["prompt"]]
    out = bert.create_embedding(texts, model="tiny")
    assert out["object"] == "list" and out["model"] == "tiny"
    assert [d["index"] for d in out["data"]] == [0, 1]
    assert all(d["object"] == "embedding" for d in out["data"])
    want = bert.embed(texts, normalize=False)
    for d, w in zip(out["data"], want):
        assert isinstance(d["embedding"], list) and len(d["embedding"]) == 64
        assert np.array_equal(np.array(d["embedding"], dtype=np.float32), w)
    n = len(refs[0]["tokens"]) + len(refs[2]["tokens"])
    assert out["usage"] == {"prompt_tokens": n, "total_tokens": n}
    single = bert.create_embedding(texts[0])
    assert len(single["data"]) == 1 and single["model"] == bert.model_path


def test_embedding_errors(bert, tiny_llama_path):
    with pytest.raises(ggrs.BadArgumentError, match="empty"):
        bert.embed([""])
    with pytest.raises(ggrs.BadArgumentError, match="128"):
        bert.embed("word " * 200)
    with pytest.raises(ggrs.BadArgumentError, match="out of range"):
        bert.embed([[101, 99999, 102]])
    with pytest.raises(ggrs.BadArgumentError, match="pooling"):
        bert.embed("x", pooling="max")
    with pytest.raises(ggrs.BadArgumentError, match="not a reranker"):
        bert.rerank("q", ["d"])
    # A decoder names no pooling: it must be given one.
    with ggrs.Model(tiny_llama_path, n_ctx=64, n_threads=1) as llama:
        assert llama.pooling is None
        with pytest.raises(ggrs.BadArgumentError, match="pooling"):
            llama.embed("The capital of France")
        v = llama.embed(["The capital of France", "is"], pooling="last")
        assert v.shape == (2, llama.n_embd)
        # Generation still works on the same model.
        assert len(llama.generate("Once", max_tokens=2, ignore_eos=True, temperature=0).tokens) == 2
