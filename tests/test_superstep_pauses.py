"""Pauses inside a superstep: each branch's `interrupt()` is asked and answered on its own,
so an answer meant for one branch never reaches another (a "no" for one question is never
taken as the answer to the next)."""

from __future__ import annotations

import operator
from typing import Annotated, Any

from typing_extensions import TypedDict

from agentlog.langgraph import END, START, Command, Send, StateGraph, interrupt


class Answers(TypedDict):
    questions: list[str]
    answers: Annotated[list[str], operator.add]


def two_askers() -> Any:
    def ask_refund(state: Answers) -> dict[str, Any]:
        return {"answers": [f"refund={interrupt('issue the refund?')}"]}

    def ask_email(state: Answers) -> dict[str, Any]:
        return {"answers": [f"email={interrupt('send the email?')}"]}

    builder = StateGraph(Answers)
    builder.add_node("ask_refund", ask_refund)
    builder.add_node("ask_email", ask_email)
    builder.add_edge(START, "ask_refund")
    builder.add_edge(START, "ask_email")
    builder.add_edge("ask_refund", END)
    builder.add_edge("ask_email", END)
    return builder.compile()


def test_each_branch_gets_the_answer_to_its_own_question() -> None:
    graph = two_askers()
    config = {"configurable": {"thread_id": "pauses"}}
    first = graph.invoke({"questions": []}, config)
    assert [i.value for i in first["__interrupt__"]] == ["issue the refund?"]
    second = graph.invoke(Command(resume="no"), config)
    # the refund's "no" is not the email's answer: the email branch asks its own question
    assert [i.value for i in second["__interrupt__"]] == ["send the email?"]
    done = graph.invoke(Command(resume="yes"), config)
    assert done["answers"] == ["refund=no", "email=yes"]
    assert graph.get_state(config).values == done  # the log folds to what the run returned


def test_sent_branches_of_one_node_are_answered_one_by_one() -> None:
    def fan(state: Answers) -> list[Send]:
        return [Send("ask", {"q": q}) for q in state["questions"]]

    def ask(arg: dict[str, str]) -> dict[str, Any]:
        return {"answers": [f"{arg['q']}={interrupt(arg['q'])}"]}

    builder = StateGraph(Answers)
    builder.add_node("ask", ask)
    builder.add_conditional_edges(START, fan, ["ask"])
    builder.add_edge("ask", END)
    graph = builder.compile()
    config = {"configurable": {"thread_id": "sent"}}
    asked = graph.invoke({"questions": ["x", "y", "z"]}, config)
    answers = {"x": "1", "y": "2", "z": "3"}
    while "__interrupt__" in asked:
        (pause,) = asked["__interrupt__"]
        asked = graph.invoke(Command(resume=answers[pause.value]), config)
    assert asked["answers"] == ["x=1", "y=2", "z=3"]
