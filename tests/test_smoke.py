from harness import session_ids


def test_keyword_search_finds_other_session_of_same_project(world):
    repo = world.folder("alpha", git=True)
    pid = world.project("Alpha", repo)
    old = world.session(
        repo, [("user", "we chose postgres for the migration"), ("assistant", "noted: postgres")]
    )
    now = world.session(repo, [("user", "what database?")])
    result = world.search(now, "postgres migration")
    print(result)
    assert result["success"] is True
    assert session_ids(result) == [old]
    assert result["project"] == {"kind": "explicit", "id": pid, "name": "Alpha"}
