"""The StratagemStatus search attribute: a run's status in visibility, for the approval inbox
(`stratagem list --status awaiting-approval`, the console) and the waiting-runs gauge. Whether a
namespace has it is asked once per client, and registered where the caller may."""

from __future__ import annotations

import asyncio
import time
import weakref

from temporalio.api.enums.v1 import IndexedValueType
from temporalio.api.operatorservice.v1 import AddSearchAttributesRequest, ListSearchAttributesRequest
from temporalio.client import Client
from temporalio.common import SearchAttributeKey
from temporalio.service import RPCError, RPCStatusCode

from stratagem.domain.run_types import AWAITING_APPROVAL, STATUS_SEARCH_ATTRIBUTE, WORKFLOW_NAME

STATUS_KEY = SearchAttributeKey.for_keyword(STATUS_SEARCH_ATTRIBUTE)
REGISTER_STATUS_HINT = f"temporal operator search-attribute create --name {STATUS_SEARCH_ATTRIBUTE} --type Keyword"


# The approval inbox: every run of the namespace waiting for a person.
AWAITING_QUERY = f"WorkflowType = '{WORKFLOW_NAME}' AND ExecutionStatus = 'Running' AND {STATUS_SEARCH_ATTRIBUTE} = '{AWAITING_APPROVAL}'"
# Clients whose namespace is known to have the attribute: asked once, not at every run start.
_HAS_STATUS: weakref.WeakSet[Client] = weakref.WeakSet()
# And when each last heard it has not: asked again after NO_STATUS_TTL seconds, so a burst of run
# starts costs one round trip, and an attribute registered meanwhile is found soon after.
_NO_STATUS: weakref.WeakKeyDictionary[Client, float] = weakref.WeakKeyDictionary()
NO_STATUS_TTL = 30.0
# The question in flight, per client: run starts that arrive while it is asked wait for its answer
# rather than each asking again (a burst of 100 starts sent 100 pairs of namespace RPCs).
_ASKING: weakref.WeakKeyDictionary[Client, asyncio.Task[bool]] = weakref.WeakKeyDictionary()


async def has_status_attribute(client: Client) -> bool:
    """True if the client's namespace has the StratagemStatus search attribute. A server that
    cannot say (the time-skipping test server) counts as not having it. A yes is remembered; a
    no for NO_STATUS_TTL seconds (`ensure_status_attribute` forgets it when it registers one)."""
    if client in _HAS_STATUS:
        return True
    checked = _NO_STATUS.get(client)
    if checked is not None and time.monotonic() - checked < NO_STATUS_TTL:
        return False
    asking = _ASKING.get(client)
    if asking is None or asking.done() or asking.get_loop() is not asyncio.get_running_loop():
        asking = _ASKING[client] = asyncio.get_running_loop().create_task(_ask_status_attribute(client))
    # Shielded: a caller that gives up does not cancel the answer the others wait for.
    return await asyncio.shield(asking)


async def _ask_status_attribute(client: Client) -> bool:
    try:
        response = await client.operator_service.list_search_attributes(
            ListSearchAttributesRequest(namespace=client.namespace)
        )
    except RPCError:
        _NO_STATUS[client] = time.monotonic()
        return False
    if STATUS_SEARCH_ATTRIBUTE in response.custom_attributes:
        _HAS_STATUS.add(client)
        _NO_STATUS.pop(client, None)
        return True
    _NO_STATUS[client] = time.monotonic()
    return False


async def ensure_status_attribute(client: Client) -> bool:
    """Register StratagemStatus (Keyword) in the client's namespace if it is missing and the
    server lets this caller (a self-hosted cluster, the dev server). False if it is still
    missing: Temporal Cloud registers attributes through its own console or `tcld`."""
    if await has_status_attribute(client):
        return True
    try:
        await client.operator_service.add_search_attributes(
            AddSearchAttributesRequest(
                namespace=client.namespace,
                search_attributes={STATUS_SEARCH_ATTRIBUTE: IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD},
            )
        )
    except RPCError as exc:
        if exc.status is not RPCStatusCode.ALREADY_EXISTS:
            return False
    # Forget the no, and a question asked before the registration, which would answer no again.
    _NO_STATUS.pop(client, None)
    _ASKING.pop(client, None)
    return await has_status_attribute(client)
