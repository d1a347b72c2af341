"""LoCoMo development split, read in place (CC BY-NC: never copied into this repository).

Mapping (``/work/shared/data/locomo/README.md``): a conversation is a project, a LoCoMo session a
Hermes session, ``speaker_a`` the user and ``speaker_b`` the assistant, a question a query from
a fresh session of the project; the gold sessions are the sessions of the evidence ids.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

DATA = Path(os.environ.get("LOCOMO_PATH", "/work/shared/data/locomo/locomo-dev.json"))
TUNE_SPLIT = ("conv-26", "conv-30", "conv-41")
CHECK_SPLIT = ("conv-42", "conv-43")
_EVIDENCE = re.compile(r"D:?(\d+):(\d+)")


@dataclass
class Turn:
    role: str  # "user" or "assistant"
    text: str
    timestamp: float | None


@dataclass
class Session:
    number: int  # LoCoMo's session_<n>
    date: str
    turns: list[Turn]


@dataclass
class Question:
    conversation: str
    index: int  # position in the conversation's qa list
    text: str
    category: int
    gold: frozenset[int]  # LoCoMo session numbers


@dataclass
class Conversation:
    sample_id: str
    speakers: tuple[str, str]
    sessions: list[Session] = field(default_factory=list)
    questions: list[Question] = field(default_factory=list)


def _timestamp(date: str) -> float | None:
    try:
        return datetime.strptime(date.strip(), "%I:%M %p on %d %B, %Y").timestamp()
    except ValueError:
        return None


def turn_text(turn: dict) -> str:
    """The turn's words; a shared photo keeps its caption (the only trace of it in the data)."""
    text = str(turn.get("text") or "").strip()
    caption = str(turn.get("blip_caption") or "").strip()
    if caption:
        text = f"{text} [shared a photo: {caption}]".strip()
    return text


def gold_sessions(evidence: list[str]) -> frozenset[int]:
    """Session numbers of the evidence ids (a few entries join several ids with ';' or spaces)."""
    return frozenset(int(m.group(1)) for item in evidence for m in _EVIDENCE.finditer(str(item)))


def load(path: Path = DATA) -> list[Conversation]:
    conversations = []
    for raw in json.loads(Path(path).read_text(encoding="utf-8")):
        conv = raw["conversation"]
        speakers = (conv["speaker_a"], conv["speaker_b"])
        item = Conversation(sample_id=raw["sample_id"], speakers=speakers)
        numbers = sorted(
            int(key.split("_")[1])
            for key in conv
            if re.fullmatch(r"session_\d+", key) and isinstance(conv[key], list)
        )
        for number in numbers:
            date = conv.get(f"session_{number}_date_time", "")
            start = _timestamp(date)
            turns = [
                Turn(
                    role="user" if turn["speaker"] == speakers[0] else "assistant",
                    text=turn_text(turn),
                    timestamp=None if start is None else start + 60.0 * i,
                )
                for i, turn in enumerate(conv[f"session_{number}"])
            ]
            item.sessions.append(Session(number=number, date=date, turns=[t for t in turns if t.text]))
        known = {s.number for s in item.sessions}
        for index, qa in enumerate(raw["qa"]):
            gold = gold_sessions(qa.get("evidence") or []) & known
            if gold:  # questions without evidence cannot be scored at session level
                item.questions.append(
                    Question(
                        conversation=item.sample_id,
                        index=index,
                        text=str(qa["question"]),
                        category=int(qa.get("category") or 0),
                        gold=gold,
                    )
                )
        conversations.append(item)
    return conversations
