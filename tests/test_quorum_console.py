"""Quorum in the review console (issue #38, item 5): a run's page says who approved a step that
needs two people and who still may; a person who approved with their own key and approves again
through the console (an approval the console's issuer key signs for them) is one person, refused.
The console under uvicorn against a run on the dev server.
"""

from __future__ import annotations

import httpx
import pytest
from conftest import harness_for
from test_console_attacks import serving

from stratagem.common.signing import Signer
from stratagem.console import AuthMode, IdentityConfig, create_app
from stratagem.domain.run_types import ApproveInput, Phase

pytestmark = pytest.mark.system

PLAN = {
    "goal": "pay the supplier",
    "steps": [
        {"id": "pay", "title": "Pay the supplier", "tool": "pay", "args": {"amount": 1200, "to": "acme"}, "quorum": 2}
    ],
}


async def test_the_run_page_shows_who_approved_and_the_console_cannot_count_them_twice(dev_env, tmp_path, monkeypatch):
    key = Signer.generate("console")
    monkeypatch.setenv("STRATAGEM_ISSUER_KEYS", key.public_line())
    async with harness_for(dev_env, tmp_path) as harness:
        run = await harness.start(PLAN, approvers=["dana", "ops", "kim"])
        await harness.wait_for(run, lambda s: s.phase is Phase.awaiting_approval)
        await run.approve(ApproveInput(by="dana", revision=1))
        await harness.wait_for(run, lambda s: [p.step_id for p in s.pending] == ["pay"])
        await run.approve(ApproveInput(by="ops", step_id="pay"))
        identity = IdentityConfig(mode=AuthMode.local, secret=b"quorum-test", local_user="ops")
        app = create_app(harness.client, identity, signer=key, store=harness.store)
        async with serving(app) as base, httpx.AsyncClient(base_url=base, headers={"Origin": base}) as http:
            page = (await http.get(f"/runs/{run.id}")).text
            assert "approved by ops (1 of 2), waiting for one more of dana, kim" in page
            csrf = (await http.get("/api/whoami")).json()["csrf"]
            form = {"kind": "step_approval", "step_id": "pay", "csrf": csrf, "verdict": "approve"}
            again = await http.post(f"/runs/{run.id}/decide", data=form)
            assert again.status_code == 303 and "ops+approved+already" in again.headers["location"]
            assert [c for c in harness.calls() if c.get("tool") == "pay"] == []
            api = (await http.get(f"/api/runs/{run.id}", headers={"X-Stratagem-CSRF": csrf})).json()
            [pending] = api["status"]["pending"]
            assert (pending["approved_by"], pending["may_approve"]) == (["ops"], ["dana", "kim"])
        await run.approve(ApproveInput(by="kim", step_id="pay"))
        assert (await run.result()).status is Phase.succeeded
        assert len([c for c in harness.calls() if c.get("tool") == "pay"]) == 1
