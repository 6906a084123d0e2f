"""LongMemEval records made up for the bench's tests: three questions over a few small sessions."""

from __future__ import annotations


def turn(role: str, content: str, has_answer: bool = False) -> dict:
    out = {"role": role, "content": content}
    if has_answer:
        out["has_answer"] = True
    return out


def record(qid: str, qtype: str, question: str, sessions: dict[str, list[dict]], answers: list[str],
           date: str = "2023/05/30 (Tue) 10:18") -> dict:
    return {
        "question_id": qid, "question_type": qtype, "question": question, "answer": "synthetic",
        "question_date": date, "haystack_session_ids": list(sessions),
        "haystack_dates": [f"2023/05/{20 + n:02d} (Sat) 0{n}:00" for n in range(len(sessions))],
        "haystack_sessions": list(sessions.values()), "answer_session_ids": answers,
    }


FILLER = {
    "f_garden": [turn("user", "Which vegetables grow well in shade?"),
                 turn("assistant", "Lettuce, spinach and kale tolerate partial shade.")],
    "f_python": [turn("user", "How do I reverse a list in Python?"),
                 turn("assistant", "Use reversed() or slicing with a negative step.")],
    "f_travel": [turn("user", "What should I pack for a week of hiking?"),
                 turn("assistant", "Layers, rain gear, a first aid kit and sturdy boots.")],
}


def synthetic_records() -> list[dict]:
    """Three questions: one answer session, two answer sessions, and an abstention (not scored)."""
    return [
        record("q_bakery", "single-session-user", "Which bakery does my cousin Ines run?", {
            **FILLER,
            "a_bakery": [turn("user", "My cousin Ines opened a sourdough bakery in Leeds.", True),
                         turn("assistant", "A sourdough bakery needs a lively starter.")],
        }, ["a_bakery"]),
        # worded so that both answer sessions hold every informative word of it: the search's relevance floor hides a
        # hit holding under 0.6 of them, and in a store this small "many" would count as much as "guitars"
        record("q_guitar", "multi-session", "Which guitars do I own now?", {
            "a_guitar1": [turn("user", "I bought my first guitar, a red hollow-body electric.", True),
                          turn("assistant", "Great choice for a first electric guitar.")],
            **FILLER,
            "a_guitar2": [turn("user", "Today I added a second guitar, an acoustic Martin.", True),
                          turn("assistant", "Acoustic and electric guitars complement each other.")],
        }, ["a_guitar1", "a_guitar2"]),
        record("q_bakery_abs", "single-session-user", "Which bakery does my uncle Rafael run?", {
            **FILLER,
            "a_bakery": [turn("user", "My cousin Ines opened a sourdough bakery in Leeds.", True),
                         turn("assistant", "A sourdough bakery needs a lively starter.")],
        }, []),
    ]
