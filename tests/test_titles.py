"""Titles as evidence (issue 30 part 5), through the real Hermes dispatcher.

Hermes titles every conversation with a one-line summary (``sessions.title``, set here with its
own ``SessionDB.set_session_title``), often in words the conversation never writes: a chat
titled ``数据库迁移报错`` talks about ``alembic upgrade head`` and a duplicate column. Keyword
mode is what a user has before ``setup``, and Chinese questions come as sentences
(``上次…是怎么解决的``): both must find it.
"""

from __future__ import annotations

import pytest
from harness import enable_plugin, session_ids, use_policy

CONVERSATIONS = [  # (attribute, title, the user's words, the reply)
    (
        "migration",
        "数据库迁移报错",
        "跑 alembic upgrade head 的时候报错了：duplicate column name: email",
        "迁移脚本里重复加了 email 列，删掉第二个 op.add_column 再跑一次就好了。",
    ),
    ("deploy", "部署脚本位置", "deploy.sh 挪到哪个目录了？", "移到 ops/bin/ 下面了，CI 也改成从那里调用。"),
    (
        "login",
        "登录超时",
        "用户反映十分钟不操作就被踢出去",
        "session cookie 的 max_age 改成了 1800 秒，闲置半小时才会失效。",
    ),
    (
        "flaky",
        "Flaky payments tests",
        "The suite in GitHub Actions fails one run in five with a random timeout",
        "Added pytest-rerunfailures with --reruns 2 and pinned the stripe mock server.",
    ),
    ("npm", "前端依赖安装", "npm install 报错 peer dependency 冲突", "加了 --legacy-peer-deps 就好了。"),
    (
        "css",
        "Button sizes on mobile",
        "The payments page renders its buttons too small on mobile",
        "Fixed the CSS.",
    ),
]


@pytest.fixture
def history(world):
    """One project: conversations whose topic is in their title only, with distractors that
    share words of the questions in their messages."""
    repo = world.folder("shop")
    world.project("Shop", repo)
    for name, title, user, reply in CONVERSATIONS:
        setattr(world, name, world.session(repo, [("user", user), ("assistant", reply)], title=title))
    world.current = world.session(repo, [("user", "hi")])
    return world


CHINESE_SENTENCES = [
    ("上次那个数据库迁移的报错是怎么解决的", "migration"),
    ("我们之前部署脚本放在哪里", "deploy"),
    ("那个登录超时的问题后来怎么样了", "login"),
]


@pytest.mark.parametrize(("question", "expected"), CHINESE_SENTENCES)
def test_a_chinese_sentence_finds_the_conversation_its_title_names(history, question, expected):
    result = history.search(history.current, question, limit=3)
    assert result["success"]
    assert session_ids(result)[0] == getattr(history, expected), result
    first = result["results"][0]
    assert first["title"]  # the title shown is the one that matched
    assert first["relevance"] >= 0.5


def test_an_english_question_finds_the_conversation_its_title_names(history):
    result = history.search(history.current, "what did we do about the flaky payments tests", limit=3)
    ids = session_ids(result)
    assert ids[0] == history.flaky, result
    assert history.css in ids  # "payments" in its text: found, after the title


def test_a_conversation_found_by_its_title_alone_shows_its_first_question(history):
    result = history.search(history.current, "部署脚本", limit=3)
    first = result["results"][0]
    assert first["session_id"] == history.deploy
    assert "deploy.sh" in first["snippet"]


@pytest.mark.parametrize(
    ("question", "expected"), [*CHINESE_SENTENCES[1:], ("flaky payments tests", "flaky")]
)
def test_without_titles_these_questions_miss(history, plugin, question, expected):
    # The control: the same history with titles weighing nothing does not put them first.
    use_policy(plugin, title_evidence=0.0)
    assert session_ids(history.search(history.current, question, limit=3))[:1] != [getattr(history, expected)]


def test_a_title_outside_the_project_is_not_read(history):
    other = history.folder("elsewhere")
    history.project("Elsewhere", other)
    stranger = history.session(other, [("user", "hello there")], title="部署脚本说明")
    assert stranger not in session_ids(history.search(history.current, "部署脚本", limit=10))


def test_the_users_operators_are_not_matched_against_titles(history):
    # A boolean query keeps FTS5's meaning over messages: the title-only conversation is not in it.
    result = history.search(history.current, "部署脚本 OR 依赖安装", limit=10)
    assert history.deploy not in session_ids(result)


def test_hybrid_gets_the_title_through_its_keyword_side(history, plugin):
    # A real embedding model behind an OpenAI-compatible server on 127.0.0.1, as the guarantees
    # suite runs it: the title-only conversation is first in hybrid mode too.
    from embedding_server import EmbeddingServer
    from harness import run_hermes, use_embedding_server

    enable_plugin(history.home)
    with EmbeddingServer() as server:
        use_embedding_server(server, index_budget_seconds=30)
        done = run_hermes(history.home, "project-history", "enable", "--yes", "--all-projects")
        assert done.returncode == 0, done.stderr
        plugin.reset_process_state()
        asked = "我们之前部署脚本放在哪里"  # words its conversation never writes: its title's
        result = history.search(history.current, asked, mode="hybrid")
        assert result["semantic_status"] == "ready", result
        first = result["results"][0]
        assert first["session_id"] == history.deploy, result
        assert first["score_source"] == "both"  # the keyword side found it, by its title
        use_policy(plugin, title_evidence=0.0)
        untitled = history.search(history.current, asked, mode="hybrid")
        by_id = {r["session_id"]: r for r in untitled["results"]}
        assert history.deploy not in by_id or by_id[history.deploy]["score_source"] == "semantic"
