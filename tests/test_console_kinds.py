"""The console decides through the table of decision kinds (stratagem.domain.decisions.kinds): each kind
has its REST endpoint at its name, and each wait a form that sends a kind answering it. What the
endpoints and forms do against real runs is tests/test_console.py's."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.routing import APIRoute

from stratagem.console import decisions
from stratagem.console.access import FormPost
from stratagem.domain.decisions import KINDS, kinds
from stratagem.domain.run_types import DecisionKind

pytestmark = pytest.mark.unit


def test_each_kind_has_one_endpoint_at_its_name():
    assert sorted(e.kind.name for e in decisions.ENDPOINTS) == sorted(kind.name for kind in KINDS)
    routes = {route.path: route for route in decisions.router.routes if isinstance(route, APIRoute)}
    for endpoint in decisions.ENDPOINTS:
        route = routes[f"/api/runs/{{run_id}}/{endpoint.kind.name}"]
        assert route.methods == {"POST"}
        assert route.body_field is not None and route.body_field.field_info.annotation is endpoint.body


class NoPlan:
    async def plan(self) -> None:
        return None


@pytest.mark.parametrize("waiting", list(DecisionKind))
async def test_each_wait_has_a_form_that_sends_a_kind_answering_it(waiting: DecisionKind):
    # Each wait's own field among them: an in-doubt step's form says whether its effect happened.
    form: dict[str, Any] = {
        "kind": waiting.value,
        "step_id": "s1",
        "answer": "yes",
        "action": "retry",
        "happened": "yes",
    }
    kind, decision = await decisions.FORMS[waiting](NoPlan(), decisions.Posted.of(FormPost("ops", form)))  # type: ignore[arg-type]
    assert kind in kinds.answered_by(waiting)
    assert isinstance(decision, kind.input)
    assert decision.by == "ops"


async def test_an_approval_forms_reject_button_sends_a_rejection():
    form = {"kind": "step_approval", "step_id": "s1", "verdict": "reject"}
    kind, _ = await decisions.approval(NoPlan(), decisions.Posted.of(FormPost("ops", form)))  # type: ignore[arg-type]
    assert kind is kinds.REJECT
