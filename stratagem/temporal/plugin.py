"""Stratagem's Temporal wiring in one object, so clients, workers, replayers and the tests are
configured alike (as pydantic-ai and the OpenAI Agents integration do with theirs):

- the data converter: compact pydantic JSON, large payloads in the output store (claim checks),
  payloads and failure messages encrypted when the settings carry a key (clients, replayers);
- how the run workflow runs: outside Temporal's sandbox, or inside it in the tests
  (`workflow_runner`; workers, replayers);
- every decision checked against the worker's keys before the workflow sees it
  (`VerifyDecisions`; workers, replayers);
- tracing, when a replay-safe tracer provider is installed (stratagem.common.telemetry).

`stratagem.client.connect` puts it on the client, and every worker built on that client takes it
from there. Which workflows and activities a worker registers depends on its role, so
`stratagem.worker.build_worker` decides that; a replayer names `StratagemRun` itself.
"""

from __future__ import annotations

import os
import pkgutil
from collections.abc import Sequence
from pathlib import Path

from temporalio.client import Client
from temporalio.converter import DataConverter
from temporalio.plugin import SimplePlugin
from temporalio.worker import Interceptor, ReplayerConfig, UnsandboxedWorkflowRunner, WorkerConfig, WorkflowRunner
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions

from stratagem.common.config import Settings
from stratagem.common.signing import DecisionPolicy
from stratagem.common.telemetry import tracing_enabled
from stratagem.io.codec import data_converter
from stratagem.io.payloads import with_claim_checks
from stratagem.io.store import OutputStore
from stratagem.temporal.interceptors import VerifyDecisions

PLUGIN_NAME = "stratagem"

# The subpackages the sandbox imports afresh: the workflow's own code, and the activities, which
# it must never import. A passthrough entry covers its submodules, so "stratagem" itself cannot
# be one (it would pass stratagem.workflows through, unsandboxed); each other module of it is.
SANDBOXED_SUBPACKAGES = ("workflows", "activities")
# Pure modules the workflow imports. Passing them through the sandbox keeps one copy of the
# pydantic models (and their validators) instead of re-importing them per workflow task.
PASSTHROUGH_MODULES = (
    *sorted(
        f"stratagem.{module.name}"
        for module in pkgutil.iter_modules([str(Path(__file__).parent.parent)])
        if module.name not in SANDBOXED_SUBPACKAGES
    ),
    "jsonschema",
    "jsonschema_specifications",
    "referencing",
    "rpds",
    "yaml",
    "attrs",
    "opentelemetry",
    "cryptography",  # signed decisions are verified inside the workflow task (stratagem.common.signing)
)
# Tests set this: they run the workflow code the way the sandbox runs a user's, imported inside
# it, so a call that would make it non-deterministic (a clock, randomness, I/O) fails loudly in
# every test and every replay of a test's history, which is what the sandbox is for.
STRICT_SANDBOX_ENV = "STRATAGEM_STRICT_SANDBOX"


def workflow_runner(strict: bool | None = None) -> WorkflowRunner:
    """How a worker runs Stratagem's workflows.

    Production workers run them outside Temporal's sandbox. The sandbox re-imports a workflow's
    module for every run and routes every payload conversion through code executed inside it;
    on a long plan it was 40% of the instructions a worker spent per step (the replay of a
    200-step chain: 15.3 million per step sandboxed, 9.3 million outside; bench/README.md). What
    it guards against, a call that is not deterministic, is guarded in the tests instead:
    `strict` (default: $STRATAGEM_STRICT_SANDBOX=1, which the test suite sets) runs the workflow
    code imported inside the sandbox, as Temporal runs a user's, so every test and every replay
    of a test's history fails on such a call. The code runs the same either way."""
    if strict is None:
        strict = os.environ.get(STRICT_SANDBOX_ENV, "").strip() in ("1", "true", "yes")
    if not strict:
        return UnsandboxedWorkflowRunner()
    return SandboxedWorkflowRunner(
        restrictions=SandboxRestrictions.default.with_passthrough_modules(*PASSTHROUGH_MODULES)
    )


class StratagemPlugin(SimplePlugin):
    """`converter`: what clients and replayers convert payloads with (None: leave theirs, e.g. a
    worker's, which takes its client's). `decision_policy`: the keys decisions are checked
    against (None: $STRATAGEM_SIGNING_* when a worker or replayer is built, so a client that
    only starts runs never reads them). `strict_sandbox`: see `workflow_runner`."""

    def __init__(
        self,
        converter: DataConverter | None = None,
        *,
        decision_policy: DecisionPolicy | None = None,
        strict_sandbox: bool | None = None,
    ) -> None:
        super().__init__(PLUGIN_NAME, data_converter=converter)
        self.decision_policy = decision_policy
        self.strict_sandbox = strict_sandbox

    @classmethod
    def for_settings(cls, settings: Settings, store: OutputStore | None = None) -> StratagemPlugin:
        """The plugin of a deployment: its converter encrypts with the settings' key (if any) and
        keeps large payloads in `store` (default: the configured output store). A malformed key
        raises ConfigError."""
        return cls(with_claim_checks(data_converter(settings), store))

    def configure_worker(self, config: WorkerConfig) -> WorkerConfig:
        config = super().configure_worker(config)
        config["workflow_runner"] = workflow_runner(self.strict_sandbox)
        config["interceptors"] = self._interceptors(config.get("interceptors") or [])
        return config

    def configure_replayer(self, config: ReplayerConfig) -> ReplayerConfig:
        config = super().configure_replayer(config)
        config["workflow_runner"] = workflow_runner(self.strict_sandbox)
        config["interceptors"] = self._interceptors(config.get("interceptors") or [])
        return config

    def _interceptors(self, given: Sequence[Interceptor]) -> list[Interceptor]:
        """Those given, without another StratagemPlugin's decision check (the last plugin's keys
        decide), then this one's, then tracing's."""
        kept = [i for i in given if not isinstance(i, VerifyDecisions)]
        added: list[Interceptor] = [VerifyDecisions(self.decision_policy or DecisionPolicy.from_env())]
        if tracing_enabled():
            # Imported only when tracing is on, as stratagem.common.telemetry does: it loads the SDK tracer.
            from temporalio.contrib.opentelemetry import OpenTelemetryInterceptor

            added.append(OpenTelemetryInterceptor())
        return [*kept, *added]


class DecisionKeys(SimplePlugin):
    """Checks decisions against `policy` on a worker whose client's StratagemPlugin set up the
    rest: a second StratagemPlugin there would configure the worker twice."""

    def __init__(self, policy: DecisionPolicy) -> None:
        super().__init__(f"{PLUGIN_NAME}.decision-keys")
        self.policy = policy

    def configure_worker(self, config: WorkerConfig) -> WorkerConfig:
        config = super().configure_worker(config)
        mine = VerifyDecisions(self.policy)
        given = list(config.get("interceptors") or [])
        placed = [mine if isinstance(i, VerifyDecisions) else i for i in given]
        config["interceptors"] = placed if mine in placed else [*placed, mine]
        return config


def worker_plugins(client: Client, decision_policy: DecisionPolicy | None = None) -> list[SimplePlugin]:
    """The plugins a worker on `client` needs: when the client carries a StratagemPlugin
    (`connect` puts one there), none, or only `decision_policy`'s keys; otherwise one."""
    if not any(isinstance(p, StratagemPlugin) for p in client.config().get("plugins", [])):
        return [StratagemPlugin(decision_policy=decision_policy)]
    return [] if decision_policy is None else [DecisionKeys(decision_policy)]
