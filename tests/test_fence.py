"""An attempt that timed out has not stopped: a blocking tool's thread goes on, and may make its
effect after the next attempt's reconcile check looked (stratagem/tools/fence.py). On the dev
server, in real time: the payment of `pay_late` outlives its step's time limit.
"""

from __future__ import annotations

import pytest
from conftest import harness_for
from support import PAYMENT_TOOLS
from support.payment_tools import payments

from stratagem.domain.ledger import EventKind
from stratagem.domain.run_types import Phase
from stratagem.tools import ToolRegistry

pytestmark = pytest.mark.system


async def test_a_payment_that_outlives_its_attempt_is_found_by_the_next_check_not_made_again(dev_env, tmp_path):
    registry = ToolRegistry.from_modules([PAYMENT_TOOLS])
    async with harness_for(dev_env, tmp_path, registry) as harness:
        harness.workspace.mkdir(parents=True, exist_ok=True)
        plan = {
            "goal": "pay invoice INV-7",
            "steps": [
                {
                    "id": "pay",
                    "title": "Pay INV-7",
                    "tool": "pay_late",
                    # The thread pays at 2.5 s; each attempt may take 1 s, and the next starts
                    # a second after: its check would look before the payment, without the fence.
                    "args": {"invoice": "INV-7", "amount": 1200, "seconds": 2.5},
                    "timeout_seconds": 1,
                    "max_attempts": 6,
                }
            ],
        }
        run = await harness.start(plan, auto_approve=True)
        result = await run.result()
        assert result.status is Phase.succeeded
        [paid] = payments(harness.workspace)
        assert paid["attempt"] == 1  # the first attempt's thread paid, after its attempt had ended
        ledger = await run.ledger()
        assert [e.kind for e in ledger.events].count(EventKind.step_reconciled) == 1
        assert ledger.steps["pay"].output["key"] == paid["key"]
