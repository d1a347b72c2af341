"""The ranking: what retrieval found (:class:`Signals`), ordered under one :class:`RankingPolicy`.

Pure: no database, no model, no clock. :func:`rank` reads top to bottom as the steps it takes:

1. **Keyword order** (:func:`keyword_order`): a question's messages weighed (bm25, identifiers
   written as code x ``literal_weight``, CJK pairs, LIKE counts), each conversation scored by its
   best message plus ln(1 + the rest), tier by tier; the user's own AND/OR/NOT keep FTS5's order.
2. **Semantic order** (:func:`semantic_order`): each hit's lift over the scope's background, each
   conversation by its best hit plus ``semantic_spread`` x ln(1 + the others).
3. **Per mode**: keyword as it is; semantic down to the floor (no padding); hybrid fused
   (:func:`fuse`: RRF over conversation rankings, then each conversation's strength), then
   keyword's order kept for a question naming things exactly, else keyword's clear winner first.
4. **The relevance floor** (:func:`has_evidence`): hybrid answers only when something is strong
   enough, or when the question as asked may be (the caller then reads it: ``floor="as_asked"``);
   semantic and hybrid answer nothing to a question naming only things the project never
   mentions (``names_absent``).
5. **Recall chats after what they cite** (:func:`recall_after_cited`): a chat that recalled other
   conversations through this tool never ranks above one it cites.
6. **Dates, one per conversation, relevance**: sessions of a date the question names first, each
   conversation's best message, and the chance that it is what the question is about (0-1,
   calibrated: :func:`relevance`).

Spec §4.4 (RRF) and §4.5 (the result rows); why each rule and constant: the policy's fields and
docs/design.md ("Ranking").
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal, NamedTuple

from .policy import RankingPolicy
from .signals import KeywordHit, KeywordSignals, Message, Question, SemanticHit, Signals, TitleHit

Source = Literal["keyword", "semantic", "both"]
Floor = Literal["met", "unmet", "as_asked"]
#: Each conversation's keyword evidence and semantic lift (:func:`evidence_by_conversation`).
Evidence = tuple[dict[str, "float | None"], dict[str, "float | None"]]


class Scored(NamedTuple):
    """A message in a ranking: where it came from and what it weighs."""

    message: Message
    source: Source
    evidence: float | None = None  # keyword: its conversation's bm25 evidence (None: LIKE only)
    lift: float | None = None  # semantic: over the background (None: no background)
    approximate_lift: float | None = None  # the same against a mean the hit weighs in
    cosine: float | None = None
    chunk: int | None = None
    like_share: float | None = None
    score: float = 0.0  # the step's own score (conversation score, RRF)
    #: keyword: the evidence of the question's own terms alone, for the floor (not the passes that
    #: fill the list when few conversations match: later tiers, Latin words as substrings)
    own_evidence: float | None = None

    @property
    def conversation(self) -> str:
        return self.message.conversation


class Result(NamedTuple):
    message: Message
    source: Source
    relevance: float
    chunk: int | None = None  # the semantic chunk matched: its text is the snippet


@dataclass(frozen=True)
class Ranking:
    """One result per conversation, best first, at most ``limit``. ``floor``: ``met``; ``unmet``
    (hybrid found nothing strong: show nothing); ``as_asked`` (unmet, but the question as asked,
    with its common words, may show evidence: the caller reads it, :func:`has_evidence`)."""

    results: tuple[Result, ...]
    floor: Floor = "met"


def rank(
    question: Question,
    signals: Signals,
    policy: RankingPolicy,
    limit: int,
    dated: frozenset[str] = frozenset(),
) -> Ranking:
    """The ranking of one search (``dated``: the sessions active on a date the question names)."""
    keyword = keyword_order(signals.keyword, policy)
    semantic = semantic_order(signals.semantic, policy)
    needed = policy.evidence_needed(question.topical_terms)
    evidence = evidence_by_conversation(keyword, semantic)  # for the strength and the relevance
    floor: Floor = "met"
    elsewhere = question.names_absent and policy.absent_names_answer_nothing and not question.has_cjk
    if question.mode == "keyword" or not semantic:
        ranked = keyword
    elif question.mode == "semantic":
        ranked = [hit for hit in semantic if clears_floor(hit, policy.semantic_floor)]
        floor = "met" if ranked and not elsewhere else "unmet"
    else:
        ranked = fuse(keyword, semantic, policy, needed, evidence)
        if question.names_exactly and policy.exact_names_keep_keyword_order:
            ranked = keyword_order_first(ranked, keyword)
        else:
            alone = signals.sole_holder if policy.sole_holder_wins else None
            ranked = keep_clear_keyword_winner(ranked, keyword, policy, needed, alone)
        if elsewhere:
            floor = "unmet"
        elif not (question.has_cjk or has_evidence(question, keyword, semantic, policy)):
            floor = "as_asked" if question.has_common_words and policy.floor_as_asked else "unmet"
    words, meaning = evidence
    results = []
    ranked = dated_first(ranked, dated)
    if policy.recall_after_cited and signals.cites:
        ranked = recall_after_cited(ranked, signals.cites)
    if policy.recall_shown_last and signals.cites:
        ranked = recall_shown_last(ranked, signals.cites)
    # The first two decide every result's relevance, so they are picked whatever ``limit`` is.
    picked = one_per_conversation(ranked, max(limit, 2))
    strengths = [
        match_strength(words.get(hit.conversation), needed, meaning.get(hit.conversation), policy)
        for hit in picked
    ]
    for position, hit in enumerate(picked[:limit]):
        judged = relevance(position, strengths, policy, question.mode)
        shown = (
            judged
            if judged is not None
            else round(0.5 * (1.0 if hit.like_share is None else hit.like_share), 2)
        )
        results.append(Result(hit.message, hit.source, shown, hit.chunk))
    return Ranking(tuple(results), floor)


# --------------------------------------------------------------------------- 1. keyword order


def keyword_order(signals: KeywordSignals, policy: RankingPolicy) -> list[Scored]:
    """Keyword hits best first, each with its evidence. A question's hits rank by conversation,
    tier by tier (:func:`rank_by_conversation`); the user's own operators and a query searched as
    written keep retrieval's order."""
    if signals.kind != "ranked":
        return [
            Scored(
                hit.message,
                "keyword",
                evidence=0.0 if signals.kind == "as_written" else _bm25(hit, policy),
                like_share=hit.like_share,
            )
            for hit in signals.hits
        ]
    tiers: dict[int, list[KeywordHit]] = {}
    for hit in signals.hits:
        tiers.setdefault(hit.tier, []).append(hit)
    if signals.titles:
        tiers.setdefault(0, [])
    return [
        scored
        for tier in sorted(tiers)
        for scored in rank_by_conversation(tiers[tier], policy, signals.titles if tier == 0 else ())
    ]


def message_score(hit: KeywordHit, policy: RankingPolicy) -> float:
    """A keyword hit's score: its passes' contributions, weighed, in the order they were read."""
    score = 0.0
    for kind, value in hit.parts:
        score += value * _weight(kind, policy)
    return score


def _bm25(hit: KeywordHit, policy: RankingPolicy, fill: bool = True) -> float | None:
    """The hit's bm25 evidence (its FTS passes, weighed; ``fill=False``: not the pass that fills
    the list, :data:`signals.PartKind` ``glued``); None when only LIKE found it."""
    own = ("bm25", "code", "activity", "activity_code")
    kinds = (*own, "glued") if fill else own
    total: float | None = None
    for kind, value in hit.parts:
        if kind in kinds:
            total = (total or 0.0) + value * _weight(kind, policy)
    return total


def _weight(kind: str, policy: RankingPolicy) -> float:
    if kind == "code":
        return policy.literal_weight
    if kind == "pairs":
        return policy.pair_boost
    if kind == "activity":
        return policy.activity_weight
    if kind == "activity_code":
        return policy.activity_weight * policy.literal_weight
    return 1.0


def conversation_score(message_scores: Sequence[float], policy: RankingPolicy) -> float:
    """The best message, plus the log of one plus the rest's sum (``add_the_rest``): the best
    message decides, the others add evidence with diminishing returns, so a conversation that
    keeps coming back to the question beats one that mentions it once, and a long one repeating a
    common word cannot outweigh a strong match."""
    if not message_scores:
        return 0.0
    best = max(message_scores)
    if not policy.add_the_rest:
        return best
    return best + math.log1p(max(0.0, sum(message_scores) - best))


def title_score(title: TitleHit, policy: RankingPolicy) -> float:
    """What a title holding the question's terms adds to its conversation's score and evidence."""
    return policy.title_evidence * title.share


def rank_by_conversation(
    hits: Iterable[KeywordHit], policy: RankingPolicy, titles: Iterable[TitleHit] = ()
) -> list[Scored]:
    """Hits ordered by their conversation's :func:`conversation_score`, then their own score;
    each carries its conversation's evidence (the same over bm25 alone; None: LIKE only). Ties go
    to the conversation whose best message is older.

    A conversation whose title holds terms of the question (``titles``) adds its
    :func:`title_score` to its score and its evidence, as the question's own terms; one that
    nothing else matched is ranked by its title alone, shown by the title's message."""
    grouped: dict[str, list[tuple[float, KeywordHit]]] = {}
    for hit in hits:
        grouped.setdefault(hit.message.conversation, []).append((message_score(hit, policy), hit))
    by_title: dict[str, float] = {}
    for title in titles:
        by_title[title.conversation] = max(by_title.get(title.conversation, 0.0), title_score(title, policy))
        if title.conversation not in grouped and title.message is not None:
            grouped[title.conversation] = [(0.0, KeywordHit(title.message))]
    conversations = []
    for members in grouped.values():
        members.sort(key=lambda m: (-m[0], m[1].message.message_id))
        if len(members) == 1:
            total, evidence = members[0][0], _bm25(members[0][1], policy)
        else:
            bm25 = [b for b in (_bm25(hit, policy) for _, hit in members) if b is not None]
            total = conversation_score([score for score, _ in members], policy)
            evidence = conversation_score(bm25, policy) if bm25 else None
        own_bm25 = [_bm25(hit, policy, fill=False) for _, hit in members if hit.tier == 0]
        owned = [b for b in own_bm25 if b is not None]
        own = conversation_score(owned, policy) if owned else None
        titled = by_title.get(members[0][1].message.conversation)
        if titled:
            total += titled
            evidence, own = (evidence or 0.0) + titled, (own or 0.0) + titled
        conversations.append((-total, members[0][1].message.message_id, total, evidence, own, members))
    conversations.sort(key=lambda c: (c[0], c[1]))
    return [
        Scored(
            hit.message,
            "keyword",
            evidence=evidence,
            like_share=hit.like_share,
            score=total,
            own_evidence=own,
        )
        for _, _, total, evidence, own, members in conversations
        for _, hit in members
    ]


# --------------------------------------------------------------------------- 2. semantic order


def semantic_order(hits: Sequence[SemanticHit], policy: RankingPolicy) -> list[Scored]:
    """Semantic hits (one per message, its best chunk) with their lift, grouped by conversation,
    the conversations by their best hit plus ``semantic_spread`` x ln(1 + the others' positive
    strength); a conversation's hits keep their order. A long message counts once, by its best
    chunk, so it cannot drown the conversation's prose."""
    scored = [with_lift(hit, policy) for hit in hits]
    groups: dict[str, list[Scored]] = {}
    for one in scored:
        groups.setdefault(one.conversation, []).append(one)

    def score(members: list[Scored]) -> float:
        strengths = [semantic_strength(m) for m in members]
        best = max(strengths)
        rest = sum(max(0.0, x) for x in strengths) - max(0.0, best)
        return best + policy.semantic_spread * math.log1p(rest)

    scores = {group: score(members) for group, members in groups.items()}
    order = sorted(groups, key=lambda group: -scores[group])  # stable: ties keep the hits' order
    return [hit for group in order for hit in groups[group]]


def with_lift(hit: SemanticHit, policy: RankingPolicy) -> Scored:
    """How far the hit lies from the query's mean similarity over the scope towards 1: unlike the
    raw cosine it has a similar range across models. None when the scope is too small
    (``min_background_chunks``) for its mean to be a background; ``approximate_lift`` is the same
    against a mean the hit weighs in, only shown, never a reason to leave a hit out."""
    mean = hit.mean
    measurable = mean is not None and mean < 1.0
    approximate = (hit.cosine - mean) / (1.0 - mean) if mean is not None and measurable else None
    usable = measurable and hit.background >= policy.min_background_chunks
    return Scored(
        hit.message,
        "semantic",
        lift=approximate if usable else None,
        approximate_lift=approximate,
        cosine=hit.cosine,
        chunk=hit.chunk,
    )


def semantic_strength(hit: Scored) -> float:
    """Its lift, else its lift against a mean it weighs in, else its cosine."""
    for value in (hit.lift, hit.approximate_lift, hit.cosine):
        if value is not None:
            return float(value)
    return 0.0


def clears_floor(hit: Scored, floor: float) -> bool:
    """Does a semantic hit reach the floor (or can it not be judged: no background)?"""
    return floor <= 0 or hit.lift is None or hit.lift >= floor


# --------------------------------------------------------------------------- 3. hybrid


def fuse(
    keyword: Sequence[Scored],
    semantic: Sequence[Scored],
    policy: RankingPolicy,
    needed: float,
    evidence: Evidence | None = None,
) -> list[Scored]:
    """RRF over the two *conversation* rankings (spec §4.4 fuses message ids; a conversation is
    often found by keyword through one message and by meaning through another, and only fusing
    conversations adds that up), each conversation shown by its best message under message-level
    RRF; then each conversation's strength added (:func:`strength`), since RRF sees only ranks.
    ``evidence``: :func:`evidence_by_conversation` of the two, when the caller has it."""
    if evidence is None:
        evidence = evidence_by_conversation(keyword, semantic)
    k = policy.rrf_k
    paths = (("keyword", keyword, policy.keyword_weight), ("semantic", semantic, policy.semantic_weight))
    if not policy.fuse_conversations:
        return _with_strength(_fuse_messages(paths, k), evidence, policy, needed)
    scores: dict[str, float] = {}
    sources: dict[str, set[str]] = {}
    ranks: dict[str, dict[str, int]] = {}
    for source, hits, weight in paths:
        for position, group in enumerate(dict.fromkeys(h.conversation for h in hits), start=1):
            scores[group] = scores.get(group, 0.0) + weight / (k + position)
            sources.setdefault(group, set()).add(source)
            ranks.setdefault(source, {})[group] = position
    best: dict[str, Scored] = {}
    for hit in _fuse_messages(paths, k):
        best.setdefault(hit.conversation, hit)
    unranked = len(scores) + 1

    def order(hit: Scored) -> tuple[float, int, int, int]:
        # Equal scores: the keyword order decides, then the semantic order (not the session's age).
        by = [ranks.get(source, {}).get(hit.conversation, unranked) for source in ("keyword", "semantic")]
        return (-scores[hit.conversation], by[0], by[1], hit.message.message_id)

    fused = [
        hit._replace(
            score=scores[hit.conversation],
            source="both" if len(sources[hit.conversation]) == 2 else hit.source,
        )
        for hit in sorted(best.values(), key=order)
    ]
    return _with_strength(fused, evidence, policy, needed)


def _with_strength(
    fused: list[Scored], evidence: Evidence, policy: RankingPolicy, needed: float
) -> list[Scored]:
    """Fused hits reordered by their RRF score plus ``strength_weight`` x their conversation's
    :func:`strength`: RRF sees only ranks, and the margin of a match should count."""
    words, meaning = evidence

    def score(hit: Scored) -> float:
        group = hit.conversation
        return hit.score + policy.strength_weight * strength(
            words.get(group), needed, meaning.get(group), policy
        )

    return sorted(fused, key=lambda hit: -score(hit))  # stable: ties keep the RRF order


def _fuse_messages(paths: Sequence[tuple[str, Sequence[Scored], float]], k: int) -> list[Scored]:
    """Message-level RRF (``w/(k + rank)`` over both message rankings): which of a conversation's
    messages shows it. A message both paths found says so (``both``)."""
    fused: dict[int, list] = {}
    for source, hits, weight in paths:
        for position, hit in enumerate(hits, start=1):
            entry = fused.setdefault(hit.message.message_id, [hit, 0.0, set()])
            entry[1] += weight / (k + position)
            entry[2].add(source)
            if source == "semantic" and entry[0].chunk is None:
                entry[0] = entry[0]._replace(chunk=hit.chunk)
    ordered = sorted(fused.values(), key=lambda e: (-e[1], e[0].message.message_id))
    return [
        hit._replace(source="both" if len(found) == 2 else next(iter(found)), score=score)
        for hit, score, found in ordered
    ]


def strength(evidence: float | None, needed: float, lift: float | None, policy: RankingPolicy) -> float:
    """A conversation's strength on both paths: the mean of its keyword evidence over what the
    question needs and its semantic lift over the floor, each capped at ``strength_cap``; a path
    that did not find it (or cannot judge) adds 0. The same two measures as :func:`relevance`,
    averaged rather than maxed: agreement counts."""
    parts = _over_what_counts(evidence, needed, lift, policy.semantic_floor)
    return sum(min(policy.strength_cap, max(0.0, part)) for part in parts if part is not None) / 2


def keyword_order_first(fused: list[Scored], keyword: Sequence[Scored]) -> list[Scored]:
    """The conversations keyword found, in keyword's order, then those semantic alone found, in
    the fused order: a question quoting an error or naming an identifier written as code names
    the conversation that has those exact words, where others are near it in meaning."""
    order = {group: position for position, group in enumerate(dict.fromkeys(h.conversation for h in keyword))}
    unranked = len(order)
    return sorted(fused, key=lambda hit: order.get(hit.conversation, unranked))  # stable


def keep_clear_keyword_winner(
    fused: list[Scored],
    keyword: Sequence[Scored],
    policy: RankingPolicy,
    needed: float | None = None,
    alone: str | None = None,
) -> list[Scored]:
    """Keyword's first conversation first when its evidence beats the second's by
    ``clear_winner_ratio``, reaches ``strong_winner_evidence`` x ``needed``, or when it is
    ``alone``: the only conversation holding the question's exact phrases. RRF sees only ranks: a
    conversation keyword ranks second and semantic first overtakes keyword's first however far
    ahead its words put it."""
    firsts: dict[str, float | None] = {}
    for hit in keyword:
        if hit.conversation not in firsts:
            firsts[hit.conversation] = hit.evidence
            if len(firsts) == 2:
                break
    if not firsts:
        return fused
    (winner, top), *rest = firsts.items()
    if top is None:
        return fused
    runner_up = rest[0][1] if rest else 0.0
    ahead = runner_up is not None and top >= policy.clear_winner_ratio * runner_up
    strong = needed is not None and top >= policy.strong_winner_evidence * needed
    if not (ahead or strong or winner == alone):
        return fused
    return [h for h in fused if h.conversation == winner] + [h for h in fused if h.conversation != winner]


# --------------------------------------------------------------------------- 4. the relevance floor


def has_evidence(
    question: Question, keyword: Sequence[Scored], semantic: Sequence[Scored], policy: RankingPolicy
) -> bool:
    """Is anything here strong enough to show? A floor for questions asked in the wrong project.

    Yes when a keyword hit's evidence reaches what the question needs, when a semantic hit's lift
    reaches the floor, or when either cannot be judged (LIKE hits carry no bm25; a scope under
    ``min_background_chunks`` has no lift)."""
    if policy.semantic_floor <= 0:
        return True
    needed = policy.evidence_needed(question.topical_terms)
    if policy.floor_own_terms_only:  # the question's own terms' matches (LIKE ones: not judged)
        judged = [hit.own_evidence for hit in keyword if hit.own_evidence is not None or hit.evidence is None]
    else:
        judged = [hit.evidence for hit in keyword]
    if any(evidence is None or evidence >= needed for evidence in judged):
        return True
    return any(hit.lift is None or hit.lift >= policy.semantic_floor for hit in semantic)


def evidence_as_asked(question: Question, signals: Signals, policy: RankingPolicy) -> bool:
    """:func:`has_evidence` of the question as asked (with the common words the ranking left
    out): a word every conversation here has is a sign the question belongs here, and the floor
    was calibrated on questions as asked."""
    keyword = keyword_order(signals.keyword, policy)
    return has_evidence(question, keyword, semantic_order(signals.semantic, policy), policy)


# --------------------------------------------------------------------------- 5. recall chats


def recall_shown_last(ranked: list[Scored], cites: Mapping[str, frozenset[str]]) -> list[Scored]:
    """Recall chats whose every cited conversation is ranked go after all other conversations:
    what they found is shown already, so the place is worth more to a conversation not shown
    yet. A chat citing something not ranked keeps its place (it still points at an answer)."""
    present = {hit.conversation for hit in ranked}
    redundant = {chat for chat, cited in cites.items() if cited and cited - {chat} <= present}
    return [h for h in ranked if h.conversation not in redundant] + [
        h for h in ranked if h.conversation in redundant
    ]


def recall_after_cited(ranked: list[Scored], cites: Mapping[str, frozenset[str]]) -> list[Scored]:
    """Each recall chat (``cites``: conversation -> the conversations it cites) held back until the
    conversations it cites that are ranked have come, everything else in its order: a chat that
    found the answer by asking this tool is second-hand, and ranks first by having the question's
    very words. A cited conversation not ranked brings nothing in; chats citing each other keep
    their order among themselves, after the rest."""
    present = {hit.conversation for hit in ranked}
    seen: set[str] = set()
    held: dict[str, list[Scored]] = {}  # chat -> its hits held back, in order
    out: list[Scored] = []

    def ready(chat: str) -> bool:
        return all(c in seen for c in cites[chat] & present if c != chat)

    for hit in ranked:
        group = hit.conversation
        if group in held or (group in cites and group not in seen and not ready(group)):
            held.setdefault(group, []).append(hit)
            continue
        out.append(hit)
        seen.add(group)
        progress = True
        while progress:  # chats whose cited conversations have all come now follow them
            progress = False
            for chat in [c for c in held if ready(c)]:
                out.extend(held.pop(chat))
                seen.add(chat)
                progress = True
    for hits in held.values():
        out.extend(hits)
    return out


# ------------------------------------------------------------- 6. dates, one per conversation, relevance


def dated_first(ranked: list[Scored], dated: frozenset[str]) -> list[Scored]:
    """Sessions active on a date the question names first ("what did we change on 3 March?"),
    each group in its own order."""
    if not dated:
        return ranked
    return [h for h in ranked if h.message.session_id in dated] + [
        h for h in ranked if h.message.session_id not in dated
    ]


def one_per_conversation(ranked: Iterable[Scored], limit: int) -> list[Scored]:
    """Each conversation's best message, in rank order (a compressed conversation's sessions are
    one, as Hermes's ``session_search`` de-duplicates by lineage)."""
    picked: dict[str, Scored] = {}
    for hit in ranked:
        if hit.conversation not in picked:
            picked[hit.conversation] = hit
            if len(picked) >= limit:
                break
    return list(picked.values())


def evidence_by_conversation(
    keyword: Sequence[Scored], semantic: Sequence[Scored]
) -> tuple[dict[str, float | None], dict[str, float | None]]:
    """Each conversation's keyword evidence (its best) and semantic lift (its best message's;
    ``approximate_lift`` where the scope is too small for a background)."""

    def lift(hit: Scored) -> float | None:
        return hit.lift if hit.lift is not None else hit.approximate_lift

    return _best(keyword, lambda hit: hit.evidence), _best(semantic, lift)


def _best(hits: Sequence[Scored], value: Callable[[Scored], float | None]) -> dict[str, float | None]:
    best: dict[str, float | None] = {}
    for hit in hits:
        found, group = value(hit), hit.conversation
        current = best.get(group)
        if found is not None and (current is None or found > current):
            best[group] = found
        else:
            best.setdefault(group, found)
    return best


def match_strength(
    evidence: float | None, needed: float, lift: float | None, policy: RankingPolicy
) -> float | None:
    """How strongly a conversation matches, in units of what counts: the stronger of its keyword
    evidence over what the question needs and its semantic lift over the floor (1: at the floor).
    None when neither side can judge."""
    parts = [p for p in _over_what_counts(evidence, needed, lift, policy.semantic_floor) if p is not None]
    return max(parts) if parts else None


#: Below this a strength counts as this (the logarithms of :func:`relevance` need a positive one).
_WEAKEST = 1e-3


def relevance(
    position: int, strengths: Sequence[float | None], policy: RankingPolicy, mode: str = "hybrid"
) -> float | None:
    """The chance, 0 to 1, that the result at ``position`` is a conversation the question is about,
    as the agent and the user read it: of results at 0.5 or more, most are; of those below, few.

    A logistic model fitted on LoCoMo's tune half (``bench/calibrate.py``; the coefficients are the
    policy's ``relevance_*``) of the result's own strength (:func:`match_strength`), whether it is
    first, and how it compares with the first: a first result far ahead of the second is likely
    right, one of several alike is not, and a later result is right mostly when it is as strong as
    the first. ``strengths``: of the ranking's first results in order (at least two when there
    are); ``mode``: keyword mode has coefficients of its own (:meth:`RankingPolicy.relevance_model`).
    None when the result's strength cannot be judged."""
    own = strengths[position]
    if own is None:
        return None
    intercept, per_log_strength, first_bonus, per_log_lead, per_log_share = policy.relevance_model(mode)
    own = max(own, _WEAKEST)
    first = max(strengths[0] if strengths[0] is not None else own, _WEAKEST)
    score = intercept + per_log_strength * math.log(own)
    if position == 0:
        second = strengths[1] if len(strengths) > 1 and strengths[1] is not None else _WEAKEST
        lead = own / max(second, _WEAKEST)
        score += first_bonus + per_log_lead * math.log(lead)
    else:
        score += per_log_share * math.log(own / first)
    return round(1.0 / (1.0 + math.exp(-score)), 2)


def _over_what_counts(
    evidence: float | None, needed: float, lift: float | None, floor: float
) -> tuple[float | None, float | None]:
    words = evidence / needed if evidence is not None and needed > 0 else None
    meaning = lift / floor if lift is not None and floor > 0 else None
    return words, meaning
