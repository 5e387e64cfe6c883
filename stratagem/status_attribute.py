"""Stratagem's search attributes: StratagemStatus, a run's status in visibility, for the approval
inbox (`stratagem list --status awaiting-approval`, the console) and the waiting-runs gauge; and
StratagemProcess, the process a run renders, for `stratagem list --process NAME`. Whether a
namespace has them is asked once per client, and they are registered where the caller may."""

from __future__ import annotations

import asyncio
import time
import weakref

from temporalio.api.enums.v1 import IndexedValueType
from temporalio.api.operatorservice.v1 import AddSearchAttributesRequest, ListSearchAttributesRequest
from temporalio.client import Client
from temporalio.common import SearchAttributeKey, SearchAttributePair
from temporalio.service import RPCError, RPCStatusCode

from stratagem.domain.process import PROCESS_SEARCH_ATTRIBUTE
from stratagem.domain.run_types import AWAITING_APPROVAL, RUN_LEVEL, STATUS_SEARCH_ATTRIBUTE, WORKFLOW_NAME, RunInput

STATUS_KEY = SearchAttributeKey.for_keyword(STATUS_SEARCH_ATTRIBUTE)
PROCESS_KEY = SearchAttributeKey.for_keyword(PROCESS_SEARCH_ATTRIBUTE)
# Every attribute Stratagem keeps, as the embedded server and the workers register them.
SEARCH_ATTRIBUTES = (STATUS_SEARCH_ATTRIBUTE, PROCESS_SEARCH_ATTRIBUTE)
REGISTER_STATUS_HINT = f"temporal operator search-attribute create --name {STATUS_SEARCH_ATTRIBUTE} --type Keyword"
REGISTER_PROCESS_HINT = f"temporal operator search-attribute create --name {PROCESS_SEARCH_ATTRIBUTE} --type Keyword"


# The approval inbox: every run of the namespace waiting for a person.
AWAITING_QUERY = f"WorkflowType = '{WORKFLOW_NAME}' AND ExecutionStatus = 'Running' AND {STATUS_SEARCH_ATTRIBUTE} = '{AWAITING_APPROVAL}'"
# The attributes each client's namespace is known to have: asked once, not at every run start.
_KNOWN: weakref.WeakKeyDictionary[Client, set[str]] = weakref.WeakKeyDictionary()
# And when each last heard which it has not: asked again after NO_STATUS_TTL seconds, so a burst of
# run starts costs one round trip, and an attribute registered meanwhile is found soon after.
_MISSING: weakref.WeakKeyDictionary[Client, dict[str, float]] = weakref.WeakKeyDictionary()
NO_STATUS_TTL = 30.0
# The question in flight, per client: run starts that arrive while it is asked wait for its answer
# rather than each asking again (a burst of 100 starts sent 100 pairs of namespace RPCs).
_ASKING: weakref.WeakKeyDictionary[Client, asyncio.Task[set[str] | None]] = weakref.WeakKeyDictionary()


async def has_search_attribute(client: Client, name: str) -> bool:
    """True if the client's namespace has the search attribute `name`. A server that cannot say
    (the time-skipping test server) counts as not having it. A yes is remembered; a no for
    NO_STATUS_TTL seconds (`ensure_status_attribute` forgets it when it registers one)."""
    if name in _KNOWN.get(client, ()):
        return True
    checked = _MISSING.get(client, {}).get(name)
    if checked is not None and time.monotonic() - checked < NO_STATUS_TTL:
        return False
    asking = _ASKING.get(client)
    if asking is None or asking.done() or asking.get_loop() is not asyncio.get_running_loop():
        asking = _ASKING[client] = asyncio.get_running_loop().create_task(_ask(client))
    # Shielded: a caller that gives up does not cancel the answer the others wait for.
    found = await asyncio.shield(asking)
    if found is None or name not in found:
        _MISSING.setdefault(client, {})[name] = time.monotonic()
        return False
    return True


async def has_status_attribute(client: Client) -> bool:
    """True if the client's namespace has the StratagemStatus search attribute (see `has_search_attribute`)."""
    return await has_search_attribute(client, STATUS_SEARCH_ATTRIBUTE)


async def has_process_attribute(client: Client) -> bool:
    """True if the client's namespace has the StratagemProcess search attribute."""
    return await has_search_attribute(client, PROCESS_SEARCH_ATTRIBUTE)


async def _ask(client: Client) -> set[str] | None:
    try:
        response = await client.operator_service.list_search_attributes(
            ListSearchAttributesRequest(namespace=client.namespace)
        )
    except RPCError:
        return None
    found = {name for name in SEARCH_ATTRIBUTES if name in response.custom_attributes}
    _KNOWN.setdefault(client, set()).update(found)
    missing = _MISSING.setdefault(client, {})
    for name in found:
        missing.pop(name, None)
    return found


async def ensure_status_attribute(client: Client) -> bool:
    """Register Stratagem's search attributes (StratagemStatus and StratagemProcess, Keywords) in
    the client's namespace where they are missing and the server lets this caller (a self-hosted
    cluster, the dev server). False if StratagemStatus is still missing: Temporal Cloud registers
    attributes through its own console or `tcld`."""
    wanted = [name for name in SEARCH_ATTRIBUTES if not await has_search_attribute(client, name)]
    if not wanted:
        return True
    for name in wanted:  # one at a time: a server refusing one (a full namespace) may take the other
        try:
            await client.operator_service.add_search_attributes(
                AddSearchAttributesRequest(
                    namespace=client.namespace,
                    search_attributes={name: IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD},
                )
            )
        except RPCError as exc:
            if exc.status is not RPCStatusCode.ALREADY_EXISTS:
                continue
    # Forget the no, and a question asked before the registration, which would answer no again.
    _MISSING.pop(client, None)
    _ASKING.pop(client, None)
    return await has_status_attribute(client)


async def start_attributes(client: Client, run: RunInput) -> tuple[RunInput, list[SearchAttributePair[str]]]:
    """A new run's input as it starts (its level; whether it keeps its status in visibility, where
    the namespace has StratagemStatus) and its search attributes: what `stratagem.client.start_run`
    starts a run with, and what a schedule starts each of its runs with (stratagem.schedules)."""
    pairs: list[SearchAttributePair[str]] = []
    if run.state is None and not run.options.status_search_attribute and await has_status_attribute(client):
        run = run.model_copy(update={"options": run.options.model_copy(update={"status_search_attribute": True})})
    if run.state is None and run.level == 0:
        run = run.model_copy(update={"level": RUN_LEVEL})
    if run.options.status_search_attribute:
        pairs.append(SearchAttributePair(STATUS_KEY, "planning"))
    if run.process is not None and await has_process_attribute(client):
        pairs.append(SearchAttributePair(PROCESS_KEY, run.process.spec.name))
    return run, pairs
