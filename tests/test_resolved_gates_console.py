"""Resolved arguments at every gate, in the review console (issue #38, item 1): a run's page shows
what a gated step will run, every value, and its form approves only that (the digest it showed).
The console under uvicorn against a run on the dev server.
"""

from __future__ import annotations

import httpx
import pytest
from conftest import harness_for
from support.plans import step
from test_console_attacks import serving

from stratagem.common.signing import Signer
from stratagem.console import AuthMode, IdentityConfig, create_app
from stratagem.domain.run_types import Phase

pytestmark = pytest.mark.system

MEMO = "invoice 2026-118 for the October retainer; " * 60  # longer than any cut


async def test_the_run_page_shows_what_a_gated_step_will_run_and_approves_only_that(dev_env, tmp_path, monkeypatch):
    key = Signer.generate("console")
    monkeypatch.setenv("STRATAGEM_ISSUER_KEYS", key.public_line())
    plan = {
        "goal": "pay the vendor",
        "steps": [
            step("profile", "fetch_profile", user="acme"),
            {**step("pay", "record", ["profile"], label=f"pay ${{profile.name}} 1200 EUR {MEMO}"), "risk": "high"},
        ],
    }
    label = f"pay Acme 1200 EUR {MEMO}"
    async with harness_for(dev_env, tmp_path) as harness:
        run = await harness.start(plan)
        await harness.wait_for(run, lambda s: s.phase is Phase.awaiting_approval)
        identity = IdentityConfig(mode=AuthMode.local, secret=b"gate-test", local_user="ops")
        app = create_app(harness.client, identity, signer=key, store=harness.store)
        async with serving(app) as base, httpx.AsyncClient(base_url=base, headers={"Origin": base}) as http:
            csrf = (await http.get("/api/whoami")).json()["csrf"]
            headers = {"X-Stratagem-CSRF": csrf}
            assert (await http.post(f"/api/runs/{run.id}/approve", json={"revision": 1}, headers=headers)).is_success
            status = await harness.wait_for(run, lambda s: any(p.preview is not None for p in s.pending))
            [shown] = [p.preview for p in status.pending if p.preview is not None]
            page = (await http.get(f"/runs/{run.id}")).text
            assert f"label=&#34;{label}&#34;" in page  # every word of it, references filled
            assert f'name="digest" value="{shown.digest}"' in page
            api = (await http.get(f"/api/runs/{run.id}", headers=headers)).json()
            previews = [p["preview"] for p in api["status"]["pending"] if p.get("preview")]
            assert previews and previews[0]["args"] == {"label": label}
            form = {"kind": "step_approval", "step_id": "pay", "csrf": csrf, "verdict": "approve"}
            stale = await http.post(f"/runs/{run.id}/decide", data={**form, "digest": "ab" * 32})
            assert stale.status_code == 303 and "changed+since+it+was+shown" in stale.headers["location"]
            assert harness.calls() == []
            done = await http.post(f"/runs/{run.id}/decide", data={**form, "digest": shown.digest})
            assert done.status_code == 303 and "error=" not in done.headers["location"]
        assert (await run.result()).status is Phase.succeeded
        assert [c["label"] for c in harness.calls()] == [label]
