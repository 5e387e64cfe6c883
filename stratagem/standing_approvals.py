"""Granting, revoking and listing standing approvals from Python (the CLI's `stratagem standing`
and `stratagem schedule create --standing-approval` call these).

A grant is signed by the person granting it, with their key (as a decision is: `decision_signer`),
over the registry it is sent to, and recorded by the task queue's registry workflow
(workflows/standing_registry.py), which the workers check it against before it counts.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime, timedelta

from temporalio.client import Client, WorkflowHandle, WorkflowUpdateFailedError
from temporalio.common import WorkflowIDConflictPolicy
from temporalio.exceptions import ApplicationError

from stratagem.client import decision_signer
from stratagem.common.config import Settings
from stratagem.common.errors import DecisionRefusedError
from stratagem.common.signing import Keyring, Signer
from stratagem.domain.process import ProcessSpec
from stratagem.domain.standing import (
    GRANT_KIND,
    GRANT_UPDATE,
    LIST_QUERY,
    REGISTRY_WORKFLOW,
    REVOKE_KIND,
    REVOKE_UPDATE,
    Bound,
    Grant,
    Registry,
    Revocation,
    parse_bound,
    registry_id,
)

RPC_TIMEOUT = timedelta(seconds=30)


def _queue(task_queue: str | None) -> str:
    return task_queue or Settings.from_env().task_queue


async def _registry(client: Client, task_queue: str) -> WorkflowHandle:
    """The task queue's registry, started now if it is not running (one per queue: its fixed id)."""
    return await client.start_workflow(
        REGISTRY_WORKFLOW,
        id=registry_id(task_queue),
        task_queue=task_queue,
        id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
        rpc_timeout=RPC_TIMEOUT,
    )


async def _send(handle: WorkflowHandle, update: str, document: Grant | Revocation) -> None:
    try:
        await handle.execute_update(update, document, result_type=str, rpc_timeout=RPC_TIMEOUT)
    except WorkflowUpdateFailedError as exc:
        cause = exc.cause
        reason = cause.message if isinstance(cause, ApplicationError) else str(cause or exc)
        raise DecisionRefusedError(f"the standing approvals refused it: {reason}") from None


async def grant_standing(
    client: Client,
    spec: ProcessSpec,
    *,
    by: str,
    bounds: Iterable[str | Bound] = (),
    steps: Sequence[str] = (),
    schedule: str | None = None,
    expires: datetime | None = None,
    comment: str = "",
    grant_id: str | None = None,
    signer: Signer | None = None,
    keyring: Keyring | None = None,
    task_queue: str | None = None,
    now: datetime | None = None,
) -> Grant:
    """Approve `spec` (this version, this digest) for every later run on `task_queue` whose inputs
    are inside `bounds` (`amount<=5000`, or Bound), and the gated `steps` named; limited to runs of
    `schedule` when given: the Temporal Schedule's id, which a run is matched on by the
    TemporalScheduledById search attribute Temporal sets on the runs a Schedule starts. Signed by `by`'s key (`signer`, STRATAGEM_SIGNING_KEY's, or the home's).
    ValueError for a bound or step that cannot be; DecisionRefusedError if the registry refuses it."""
    parsed = [b if isinstance(b, Bound) else parse_bound(b, spec) for b in bounds]
    step_ids = {step.id for step in spec.steps}
    if unknown := [s for s in steps if s not in step_ids]:
        raise ValueError(f"{spec.label} has no step {', '.join(unknown)} (its steps: {', '.join(step_ids) or 'none'})")
    approved = spec.model_copy(update={"source": None})
    queue = _queue(task_queue)
    handle = await _registry(client, queue)
    unsigned = Grant(
        id=grant_id or f"{spec.name}.{uuid.uuid4().hex[:8]}",
        by=by,
        process=spec.name,
        version=spec.version,
        digest=approved.digest,
        spec=approved,
        bounds=parsed,
        steps=list(dict.fromkeys(steps)),
        schedule=schedule,
        granted_at=now or datetime.now(UTC),
        expires=expires,
        comment=comment,
    )
    grant: Grant = decision_signer(by, signer, keyring).sign(handle.id, GRANT_KIND, unsigned)
    await _send(handle, GRANT_UPDATE, grant)
    return grant


async def revoke_standing(
    client: Client,
    grant_id: str,
    *,
    by: str,
    reason: str,
    signer: Signer | None = None,
    keyring: Keyring | None = None,
    task_queue: str | None = None,
) -> Revocation:
    """End a standing approval: every run that asks after this waits for a person."""
    handle = await _registry(client, _queue(task_queue))
    unsigned = Revocation(id=grant_id, by=by, reason=reason, at=datetime.now(UTC))
    revocation: Revocation = decision_signer(by, signer, keyring).sign(handle.id, REVOKE_KIND, unsigned)
    await _send(handle, REVOKE_UPDATE, revocation)
    return revocation


async def list_standing(client: Client, *, task_queue: str | None = None) -> Registry:
    """Every grant and revocation the task queue's registry holds (none before the first grant)."""
    handle = await _registry(client, _queue(task_queue))
    return await handle.query(LIST_QUERY, result_type=Registry, rpc_timeout=RPC_TIMEOUT)
