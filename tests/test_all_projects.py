"""Issue 32 part 1: ``scope: all``, another project when the user asks for it, through the real
dispatcher (``model_tools.handle_function_call``) and the real ``hermes`` CLI.

The tiers: the asking conversation's project, then Home (sessions in no project), then other
projects; each result names its project, the current conversation is never among them.
"""

from __future__ import annotations

import pytest
from harness import enable_plugin, run_hermes, session_ids, use_embedding_server


def explicit(pid: str, name: str) -> dict:
    return {"kind": "explicit", "id": pid, "name": name}


HOME = {"kind": "home"}


@pytest.fixture
def tiers(world):
    """Projects A and B and Home, each with two conversations about the okapi gateway."""
    w = world
    w.a_dir, w.b_dir = w.folder("work/a"), w.folder("work/b")
    w.home_dir = w.folder("scratch")  # in no project, no git
    w.a, w.b = w.project("A", w.a_dir), w.project("B", w.b_dir)
    w.a_mates = [w.session(w.a_dir, [("user", f"okapi gateway retry in A, take {n}")]) for n in (1, 2)]
    w.b_mates = [w.session(w.b_dir, [("user", f"okapi gateway retry in B, take {n}")]) for n in (1, 2)]
    w.home_mates = [w.session(w.home_dir, [("user", f"okapi gateway retry at Home, {n}")]) for n in (1, 2)]
    w.asking_a = w.session(w.a_dir, [("user", "okapi gateway retry: did we solve it elsewhere?")])
    w.asking_home = w.session(w.home_dir, [("user", "okapi gateway retry, asked from Home")])
    return w


def search_all(w, session_id, query="okapi gateway retry", limit=10, mode="keyword", **extra):
    args = {"query": query, "mode": mode, "limit": limit, "scope": "all", **extra}
    return w.call("project_history_search", args, session_id)


def test_all_from_a_project_orders_tiers_and_names_projects(tiers):
    w = tiers
    found = search_all(w, w.asking_a)
    assert found["success"] and found["scope"] == "all"
    assert found["project"] == explicit(w.a, "A")
    ids = session_ids(found)
    assert sorted(ids[:2]) == sorted(w.a_mates)
    assert sorted(ids[2:5]) == sorted([*w.home_mates, w.asking_home])  # another Home conversation
    assert sorted(ids[5:]) == sorted(w.b_mates)
    assert w.asking_a not in ids and w.asking_home in ids  # the asker never; another Home chat yes
    named = {r["session_id"]: r["project"] for r in found["results"]}
    assert all(named[s] == explicit(w.a, "A") for s in w.a_mates)
    assert all(named[s] == HOME for s in [*w.home_mates, w.asking_home])
    assert all(named[s] == explicit(w.b, "B") for s in w.b_mates)


def test_all_from_home_puts_home_first(tiers):
    w = tiers
    found = search_all(w, w.asking_home)
    ids = session_ids(found)
    assert found["project"] == HOME
    assert w.asking_home not in ids
    home_part = [r for r in found["results"] if r["project"] == HOME]
    assert sorted(r["session_id"] for r in home_part) == sorted(w.home_mates)
    assert [r["project"] for r in found["results"][:2]] == [HOME, HOME]
    rest = {r["project"]["id"] for r in found["results"][2:]}
    assert rest == {w.a, w.b}


def test_limit_counts_every_tier(tiers):
    w = tiers
    found = search_all(w, w.asking_a, limit=3)
    assert [r["project"] for r in found["results"]] == [explicit(w.a, "A")] * 2 + [HOME]


def test_project_scope_is_the_answer_of_before(tiers):
    w = tiers
    for mode in ("keyword", "hybrid", "semantic"):
        before = w.call("project_history_search", {"query": "okapi gateway", "mode": mode}, w.asking_a)
        again = w.call(
            "project_history_search", {"query": "okapi gateway", "mode": mode, "scope": "project"}, w.asking_a
        )
        assert again == before
        assert "project" not in before["results"][0]
        assert set(session_ids(before)) <= set(w.a_mates)


def test_hybrid_all_says_other_tiers_are_keyword(tiers):
    """Semantic search is off here (no consent): every tier answers by keyword, and says so."""
    w = tiers
    found = search_all(w, w.asking_a, mode="hybrid")
    assert {r["score_source"] for r in found["results"]} == {"keyword"}
    assert any("Home" in note and "keyword" in note for note in found.get("warnings", []))
    assert any("project B" in note for note in found.get("warnings", []))


@pytest.mark.parametrize("bad", ["everything", 3, ["all"], "ALL"])
def test_bad_scope_is_one_json_error(tiers, bad):
    import model_tools

    raw = model_tools.handle_function_call(
        "project_history_search", {"query": "okapi", "scope": bad}, task_id="t", session_id=tiers.asking_a
    )
    assert "\n" not in raw
    import json

    answer = json.loads(raw)
    assert answer["success"] is False and "scope must be one of" in answer["error"]


def test_nothing_anywhere(tiers):
    found = search_all(tiers, tiers.asking_a, query="zebrafish")
    assert found["results"] == [] and found["message"]


def test_cli_all_projects_names_each_project(tiers):
    w = tiers
    enable_plugin(w.home)
    done = run_hermes(
        w.home,
        "project-history",
        "search",
        "okapi",
        "gateway",
        "retry",
        "--mode",
        "keyword",
        "--limit",
        "10",
        "--all-projects",
        cwd=w.a_dir,
    )
    assert done.returncode == 0, done.stderr
    out = done.stdout
    projects = [line.strip() for line in out.splitlines() if line.strip().startswith("project: ")]
    # By folder there is no asking conversation: all 3 of A, 3 at Home, 2 of B.
    assert projects == [f"project: A ({w.a})"] * 3 + ["project: Home"] * 3 + [f"project: B ({w.b})"] * 2
    plain = run_hermes(w.home, "project-history", "search", "okapi", "--mode", "keyword", cwd=w.a_dir)
    assert plain.returncode == 0 and "project: " not in plain.stdout


def test_hybrid_all_is_semantic_only_where_consented(world, plugin):
    """Consent for A only: A's tier answers semantically (a synonym keyword misses), Home's and B's
    by keyword, the answer says so, and no text of theirs reaches the provider."""
    from embedding_server import EmbeddingServer

    w = world
    with EmbeddingServer() as server:
        plugin.reset_process_state()
        use_embedding_server(server, enabled=True, index_budget_seconds=60)
        a_dir, b_dir, home_dir = w.folder("a", git=True), w.folder("b", git=True), w.folder("scratch")
        a, b = w.project("A", a_dir), w.project("B", b_dir)
        env = plugin.store.HermesEnv.current()
        consent = plugin.semantic.consent
        record = consent.consent_record(env.settings.embedding, env.profile, [a], "2026-11-29T12:00:00")
        consent.write_consent(env, record)
        expiry = w.session(a_dir, [("user", "The login session expires after five minutes of inactivity")])
        in_b = w.session(b_dir, [("user", "authentication timeout handling in the B service")])
        at_home = w.session(home_dir, [("user", "authentication timeout notes kept at Home")])
        current = w.session(a_dir, [("user", "hi")])
        server.reset()
        found = search_all(w, current, query="authentication timeout", mode="hybrid")
        texts = [
            text
            for body in server.bodies
            if body.get("input_type") != "query"
            for text in (body["input"] if isinstance(body["input"], list) else [body["input"]])
        ]
    assert found["semantic_status"] == "ready"
    rows = {r["session_id"]: r for r in found["results"]}
    assert session_ids(found)[0] == expiry and rows[expiry]["score_source"] == "semantic"
    assert rows[expiry]["project"] == explicit(a, "A")
    assert (rows[at_home]["project"], rows[in_b]["project"]) == (HOME, explicit(b, "B"))
    assert session_ids(found)[1:] == [at_home, in_b]
    assert rows[at_home]["score_source"] == rows[in_b]["score_source"] == "keyword"
    assert any(note.startswith("Semantic search does not cover Home") for note in found["warnings"])
    assert any(note.startswith("Semantic search does not cover project B") for note in found["warnings"])
    assert texts and not any("B service" in t or "at Home" in t for t in texts)
