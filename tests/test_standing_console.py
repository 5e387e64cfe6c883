"""A standing approval that did not apply, in the review console: the run's page says why, beside
the plan under review. The console under uvicorn against a run on the dev server."""

from __future__ import annotations

import html

import httpx
import pytest
from conftest import harness_for
from test_console_attacks import serving
from test_standing_runs import PAYOUT

from stratagem.common.signing import Signer
from stratagem.console import AuthMode, IdentityConfig, create_app
from stratagem.domain.process import ProcessRun
from stratagem.domain.run_types import RunInput
from stratagem.domain.standing import registry_id
from stratagem.standing_approvals import grant_standing

pytestmark = pytest.mark.system


async def test_the_run_page_says_which_bound_kept_the_standing_approval_from_applying(dev_env, tmp_path):
    async with harness_for(dev_env, tmp_path) as harness:
        await grant_standing(
            harness.client, PAYOUT, by="dana", bounds=["amount<=5000"], grant_id="small", task_queue=harness.task_queue
        )
        process = ProcessRun(spec=PAYOUT, inputs={"vendor": "acme", "amount": 7000})
        run = await harness.start_input(RunInput(process=process))
        await harness.wait_for(run, lambda s: bool(s.pending))
        identity = IdentityConfig(mode=AuthMode.local, secret=b"standing-test", local_user="lee")
        app = create_app(harness.client, identity, signer=Signer.generate("console"), store=harness.store)
        async with serving(app) as base, httpx.AsyncClient(base_url=base, headers={"Origin": base}) as http:
            page = html.unescape((await http.get(f"/runs/{run.id}")).text)
        assert (
            '<p class="standing" role="note">a standing approval exists but did not apply: standing approval small '
            "(dana): amount=7000 is outside the bound amount<=5000</p>"
        ) in page
        assert harness.calls() == []
        await harness.client.get_workflow_handle(registry_id(harness.task_queue)).terminate(reason="test finished")
