"""Every tuned constant and rule switch of the ranking, in one frozen object.

Each field says in one line what it does and the data it was chosen on; the figures are in
docs/benchmarks.md ("Why each default"), the history in CHANGELOG.md. Retrieval and
:func:`ranking.rank` take a :class:`RankingPolicy`; tests and benchmarks pass a variant
(``dataclasses.replace(DEFAULT_POLICY, ...)``), nothing patches a module.

The user's own knobs (``rrf_k``, the two weights, ``relevance_floor``, ``top_k``) live in
config.yaml (``config_schema.EmbeddingSettings``); :meth:`RankingPolicy.with_settings` puts them
in, so one object describes a search's whole ranking.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any

#: The semantic relevance floor per model family (the lift below which a question asked in the
#: wrong project is told "nothing" while recall in the right project holds; LoCoMo off-topic and
#: transcripts tune half). Models whose similarities spread wider need a higher floor.
SEMANTIC_FLOORS: Mapping[str, float] = MappingProxyType({"minilm": 0.28, "e5": 0.22})
#: Unknown models get the lowest measured floor, which suppresses least.
UNKNOWN_MODEL_FLOOR = 0.22
#: The models whose floor was measured, by the name a provider serves them under (its organisation
#: and a quantisation suffix aside), and their family.
MODEL_FAMILIES: Mapping[str, str] = MappingProxyType(
    {
        "all-minilm-l6-v2": "minilm",
        "all-minilm-l12-v2": "minilm",
        "paraphrase-multilingual-minilm-l12-v2": "minilm",
        "multilingual-e5-small": "e5",
        "multilingual-e5-base": "e5",
        "multilingual-e5-large": "e5",
        "e5-small": "e5",
        "e5-small-v2": "e5",
        "e5-base-v2": "e5",
        "e5-large-v2": "e5",
    }
)


def model_family(model: str) -> str | None:
    """The family of a model named ``model`` (``sentence-transformers/all-MiniLM-L6-v2``,
    ``all-MiniLM-L6-v2-int8``: ``minilm``), or None for a model nobody measured."""
    name = model.strip().casefold().rsplit("/", 1)[-1]
    for suffix in ("-int8", "-onnx", "-q8", "-quantized"):
        name = name.removesuffix(suffix)
    return MODEL_FAMILIES.get(name)


@dataclass(frozen=True)
class RankingPolicy:
    # ---------------------------------------------------------------- keyword retrieval
    #: Message rows read per FTS query before reducing to conversations (speed at scale: scale.py).
    scan_limit: int = 300
    #: Matching messages read per conversation: enough for its evidence to add up, few enough that
    #: one conversation repeating a word hundreds of times cannot hide the others (LoCoMo, transcripts).
    ranked_per_session: int = 20
    #: What the agent did or saw (tool calls, tool output) weighs this much of a word match in its
    #: turn's opening message (0: not evidence). Hermes-shaped transcripts, tune half.
    activity_weight: float = 0.75
    #: Matching tool rows read per session for that, beside the ``ranked_per_session`` messages.
    activity_per_session: int = 3
    #: And per FTS query, best first: each is looked up for its turn (a 100k-message project's
    #: common words matched a thousand; scale.py --shape hermes). Transcripts: no project reaches it.
    activity_rows: int = 100
    #: Conversations retrieval gathers before its fallback passes stop: the tool's largest
    #: ``limit``, so that the first results never depend on the ``limit`` asked for.
    gather_conversations: int = 10
    #: A project of more conversations ranks by the messages holding every word first, when enough
    #: do (an AND seeks through the rarer words' lists; scale.py --only zipf, LoCoMo unchanged).
    every_word_first_above: int = 200

    # ---------------------------------------------------------------- words every conversation has
    #: A topical word in more than this share of the conversations cannot tell them apart: ranking
    #: and the semantic query leave it out (LoCoMo: the speakers' names; transcripts: a project's name).
    common_share: float = 0.9
    #: Below this many conversations a share is no statistic: nothing is left out.
    common_min_conversations: int = 10
    #: A larger scope is judged by its most recent conversations (bounds the reads; transcripts).
    common_recent_conversations: int = 200

    # ---------------------------------------------------------------- keyword scores
    #: An identifier written as code (``health_endpoint``) counts this many times its bm25: prose
    #: matches its phrase too, and the trigram bm25 of a config block is small (transcripts tune).
    literal_weight: float = 2.0
    #: What a two-character CJK word found in a candidate's text adds (no table can search it;
    #: transcripts Chinese questions).
    pair_boost: float = 1.0
    #: A conversation scores its best message plus ln(1 + the rest's sum); off: the best alone
    #: (LoCoMo and transcripts, issue 20).
    add_the_rest: bool = True

    #: A conversation whose title (Hermes's one-line summary) holds every ranking term of the
    #: question gains this much evidence, a share of it for a share of the terms: as much as a
    #: message needs to count (``keyword_evidence``). Titles name what a conversation is about in
    #: words it may never write (tests/test_titles.py; transcripts and LoCoMo keyword unchanged).
    title_evidence: float = 10.0
    #: Titles read per search, the scope's most recent sessions' (a project of thousands of
    #: sessions: docs/benchmarks.md, "Titles").
    title_sessions: int = 2000

    # ---------------------------------------------------------------- keyword evidence
    #: The bm25 a conversation needs for its keyword match to be evidence (with the semantic floor,
    #: LoCoMo off-topic vs in-project recall).
    keyword_evidence: float = 10.0
    #: ... per topical word below that, for questions of one or two words (4, 8, then 10).
    keyword_evidence_per_term: float = 4.0

    # ---------------------------------------------------------------- semantic
    #: How much a conversation's other semantic hits add to its best one: x ln(1 + their sum)
    #: (LoCoMo, transcripts).
    semantic_spread: float = 0.1
    #: Below this many chunks the scope's mean cosine is no background: no lift, no floor.
    min_background_chunks: int = 100

    # ---------------------------------------------------------------- hybrid fusion
    #: RRF over the two paths' *conversation* rankings; off: spec §4.4's RRF over message ids
    #: (a conversation found through different messages cannot add them up; LoCoMo, issue 4).
    fuse_conversations: bool = True
    #: RRF's k over conversation rankings (config ``rrf_k``; tune.py on LoCoMo and transcripts).
    rrf_k: int = 5
    #: Weights of the two rankings in RRF (config ``keyword_weight``/``semantic_weight``).
    keyword_weight: float = 1.5
    semantic_weight: float = 1.0
    #: What a conversation's strength (evidence over what is needed, lift over the floor, averaged)
    #: adds to its RRF score: enough to reorder neighbours (transcripts tune, issue 20).
    strength_weight: float = 0.05
    #: Strength counted at most this many times what is needed: one path cannot outvote the other.
    strength_cap: float = 3.0
    #: Keyword's first stays first when its evidence beats the second's by this ratio (LoCoMo).
    clear_winner_ratio: float = 1.2
    #: ... or reaches this many times what the question needs: an exact error line or key
    #: (transcripts tune any@1).
    strong_winner_evidence: float = 5.0
    #: ... or when it is the only conversation holding the question's exact phrases (transcripts).
    sole_holder_wins: bool = True
    #: A question quoting an error or naming an identifier written as code keeps keyword's order
    #: (transcripts tune title questions).
    exact_names_keep_keyword_order: bool = True

    # ---------------------------------------------------------------- the relevance floor
    #: The semantic lift hybrid needs when no keyword hit is strong, and semantic mode shows a hit
    #: by; 0: no floor (config ``relevance_floor``; else per model, :data:`SEMANTIC_FLOORS`).
    semantic_floor: float = UNKNOWN_MODEL_FLOOR
    #: When the ranking's own hits fall short of the floor, the question as asked (with its common
    #: words) may still show evidence (LoCoMo in-project recall at the floor).
    floor_as_asked: bool = True
    #: The floor judges the matches of the question's own terms, not those of the passes that fill
    #: the list when few conversations match (common words alone, CJK pairs by LIKE, Latin words as
    #: substrings), which retrieval runs until it has ``gather_conversations`` (LoCoMo off-topic,
    #: tune half, confirmed on the check half; one in-project tune question lost).
    floor_own_terms_only: bool = True

    #: A question that names things (proper names: ``fulltext.query.named_things``) none of which
    #: occurs anywhere in the project is about another project: semantic and hybrid answer nothing
    #: (LoCoMo off-topic at limit 10, tune half, confirmed on the check half; transcripts tune).
    absent_names_answer_nothing: bool = True

    # ---------------------------------------------------------------- recall chats
    #: A chat that recalled other conversations with this tool ranks after the ones it cites:
    #: second-hand, what it cites is the answer (transcripts recall shape, tune half, issue 30).
    recall_after_cited: bool = True
    #: A recall chat whose every cited conversation is ranked goes after all the others: its place
    #: is worth more to one not shown yet (recall shape, tune half: MRR up, any@k equal).
    recall_shown_last: bool = True
    #: Candidate conversations, best first, whose sessions are read for recall chats (each read
    #: visits a session's tool rows; the rules only move a chat down, so later ones are not shown).
    citation_conversations: int = 50

    # ---------------------------------------------------------------- relevance (calibrated)
    #: A result's relevance is the logistic of these times ln(its strength), whether it is first,
    #: ln(the first's lead over the second) for the first, ln(its share of the first's strength)
    #: for the others: fitted on LoCoMo's tune half, hybrid (bench/calibrate.py), checked on the
    #: check half and in keyword mode. The order never depends on them.
    relevance_intercept: float = -2.23
    relevance_per_log_strength: float = 1.21
    relevance_first: float = 2.15
    relevance_per_log_lead: float = 1.71
    relevance_per_log_share_of_first: float = 1.98
    #: The same model fitted on keyword mode's own results (tune half): keyword mode has no floor
    #: and no name check, so a question asked in the wrong project still shows word matches, and
    #: the hybrid model read them as likely right.
    keyword_relevance_intercept: float = -2.28
    keyword_relevance_per_log_strength: float = 1.95
    keyword_relevance_first: float = 1.54
    keyword_relevance_per_log_lead: float = -0.13
    keyword_relevance_per_log_share_of_first: float = 1.06

    #: Free-form notes of a variant (benchmarks name their variants with it); not read.
    label: str = field(default="default", compare=False)

    def with_settings(self, embedding: Any) -> RankingPolicy:
        """This policy with the user's settings (``EmbeddingSettings``) and the floor of their
        model (``relevance_floor: -1``: the model family's, :data:`SEMANTIC_FLOORS`)."""
        floor = embedding.relevance_floor
        if floor < 0:
            floor = SEMANTIC_FLOORS.get(model_family(embedding.model) or "", UNKNOWN_MODEL_FLOOR)
        return replace(
            self,
            rrf_k=embedding.rrf_k,
            keyword_weight=embedding.keyword_weight,
            semantic_weight=embedding.semantic_weight,
            semantic_floor=floor,
        )

    def relevance_model(self, mode: str) -> tuple[float, float, float, float, float]:
        """The relevance model's coefficients for a search in ``mode`` (intercept, per log strength,
        first, per log lead, per log share of the first): keyword mode's own, else hybrid's."""
        if mode == "keyword":
            return (
                self.keyword_relevance_intercept,
                self.keyword_relevance_per_log_strength,
                self.keyword_relevance_first,
                self.keyword_relevance_per_log_lead,
                self.keyword_relevance_per_log_share_of_first,
            )
        return (
            self.relevance_intercept,
            self.relevance_per_log_strength,
            self.relevance_first,
            self.relevance_per_log_lead,
            self.relevance_per_log_share_of_first,
        )

    def evidence_needed(self, topical_terms: int | None) -> float:
        """The bm25 a keyword hit needs to count as evidence, for a question of ``topical_terms``
        topical words (None: not known, the full :attr:`keyword_evidence`)."""
        if topical_terms is None:
            return self.keyword_evidence
        return min(self.keyword_evidence, self.keyword_evidence_per_term * max(topical_terms, 1))


DEFAULT_POLICY = RankingPolicy()
