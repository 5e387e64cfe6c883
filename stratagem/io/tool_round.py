"""The tool calls of one model answer in an llm step: checked, run concurrently, answered in order.

The calls the executor's model asks for in one answer (stratagem.io.executor) that have no result
yet are answered here. A call outside the step's allowlist is refused, one whose arguments are
not a JSON object is told so, one a person rejected is not run: all at once. The others run
concurrently, at most `LlmStepInput.max_parallel` at once (the run's `max_parallel`), started in
the answer's order, sync tools in threads (stratagem.tools.fence) and async ones on the event
loop. A call that waits for a person's decision stops the round there (`AwaitingApproval`): the
calls before it run first. Positions, and so idempotency keys, are fixed before any call runs;
results go into the conversation, and records into the progress, in the answer's order
(stratagem.io.in_flight).
"""

from __future__ import annotations

import asyncio
import json
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from stratagem.common.errors import StratagemError, ToolError
from stratagem.domain import activity_io
from stratagem.domain.ledger import ToolCallRecord, ToolCallStatus
from stratagem.io.in_flight import (
    RECONCILED,
    InFlightCall,
    arguments_digest,
    flight,
    insert_answer,
    owed_at,
    reconciled,
)
from stratagem.models.base import Message, ToolCall, redact
from stratagem.tools.definition import ToolContext
from stratagem.tools.registry import ToolRegistry

MAX_TOOL_RESULT_CHARS = 16_000


class Progress(Protocol):
    """What a round reads and changes of the executor's progress (stratagem.io.executor.ExecutorProgress)."""

    messages: list[Message]
    tool_calls: list[ToolCallRecord]
    in_flight: list[InFlightCall]


class AwaitingApproval(Exception):
    """The executor stopped before a tool call that waits for a person's decision. Not an error:
    the step is not done, and goes on when it is dispatched again with the decision."""

    def __init__(self, awaited: activity_io.AwaitedCall):
        super().__init__(f"tool call {awaited.call_id} ({awaited.tool}) waits for a decision")
        self.awaited = awaited


class ToolRound:
    """Answers the owed tool calls of an executor's conversation (`finish`), naming the calls in
    flight (`flying`) for every save."""

    def __init__(
        self,
        request: activity_io.LlmStepInput,
        registry: ToolRegistry,
        *,
        workspace: Path,
        attempt: int,
        progress: Progress,
        allowed: list[str],
        gated: set[str],
        save: Callable[[], None],
    ):
        self.request = request
        self.registry = registry
        self.workspace = workspace
        self.attempt = attempt
        self.progress = progress
        self.allowed = allowed
        self.gated = gated
        self._save = save
        # The calls an earlier attempt had started (or was about to) and left without an answer.
        self.inherited = list(progress.in_flight)
        # The calls that may have started and have no answer yet, by position: named at every save.
        self._flying = {c.call: c for c in self.inherited}

    @property
    def flying(self) -> list[InFlightCall]:
        return sorted(self._flying.values(), key=lambda c: c.call)

    async def finish(self) -> None:
        """Answer the tool calls of the last assistant turn that have no result yet: those that
        cannot run (refused, bad arguments, rejected) at once, the others concurrently, at most
        `max_parallel` at once, started in the answer's order. Every position is fixed before any
        call runs. The progress is saved once the calls are started, and again after each one
        finishes (from this task only: saves never race), so an attempt that dies midway resumes
        with the calls it owes. A call that waits for a person stops the round there: the calls
        before it run and keep their results, and the dispatch that goes on from the pause answers
        it and the ones after it. A call that fails unexpectedly fails the attempt once the calls
        already running have finished (no new one starts); a cancelled attempt cancels and awaits
        every call running."""
        owed = owed_at(self.progress.messages, len(self.progress.tool_calls))
        if not owed:
            return
        positions = {p for p, _ in owed}
        self._flying = {p: c for p, c in self._flying.items() if p in positions}
        queue: deque[_Pending] = deque()
        paused: AwaitingApproval | None = None
        for position, call in owed:
            try:
                ready = self._prepare(position, call)
            except AwaitingApproval as stop:
                paused = stop
                break
            if isinstance(ready, _Pending):
                queue.append(ready)
            else:
                self._answer(ready)
        running: dict[asyncio.Task[_Answer], _Pending] = {}
        failure: BaseException | None = None
        try:
            while True:
                while queue and failure is None and len(running) < self.request.max_parallel:
                    pending = queue.popleft()
                    self._flying[pending.position] = pending.flight
                    running[asyncio.create_task(self._run(pending))] = pending
                self._save()  # before the calls just started run: it names them
                if not running:
                    break
                done, _ = await asyncio.wait(running, return_when=asyncio.FIRST_COMPLETED)
                for task in sorted(done, key=lambda t: running[t].position):
                    pending = running.pop(task)
                    error = asyncio.CancelledError() if task.cancelled() else task.exception()
                    if error is not None:
                        failure = failure or error  # it stays in flight: the next attempt checks it
                        continue
                    self._answer(task.result())
                    del self._flying[pending.position]
        finally:
            for task in running:
                task.cancel()
            if running:
                await asyncio.wait(running)
            self.progress.in_flight = self.flying
        if failure is not None:
            raise failure
        if paused is not None:
            raise paused

    def _prepare(self, position: int, call: ToolCall) -> _Answer | _Pending:
        """A tool call's answer when it cannot run (outside the allowlist, arguments that are not a
        JSON object, rejected by a person), else what running it needs. Raises AwaitingApproval
        for a call that waits for a person's decision."""
        arguments = call.raw_arguments if call.arguments is None else json.dumps(call.arguments, default=str)

        def answer(status: ToolCallStatus, content: str, message: str = "") -> _Answer:
            return _Answer(position, call, arguments, status, content, message)

        if call.name not in self.allowed:
            why = f"tool '{call.name}' is not authorized for step '{self.request.step.id}'"
            allowed = ", ".join(self.allowed) or "none"
            return answer(
                ToolCallStatus.refused,
                f"Refused: {why}. The tools this step may call: {allowed}. It was not run.",
                why,
            )
        if call.arguments is None:
            why = f"the arguments are not a JSON object: {call.raw_arguments[:200]}"
            return answer(ToolCallStatus.error, f"Error: {why}. Call it again with a JSON object.", why)
        approved_by = ""
        if call.name in self.gated:
            decision = self.request.call_decisions.get(str(position))
            # Every argument, never cut: a long memo first once hid the payee and the amount behind
            # a 2,000-character cut. Credentials are masked value by value, so a masked value can
            # never swallow the fields after it (a PEM header with no end once hid the payee), and
            # the approval names the digest of the arguments themselves: two calls that look alike
            # once masked are never approved as one.
            shown = json.dumps(_masked(call.arguments), ensure_ascii=False, default=str)
            digest = arguments_digest(call.arguments)
            if decision is not None and decision.digest is not None and decision.digest != digest:
                decision = None  # approved for other arguments: these are asked about anew
            if decision is None:
                # Nothing is recorded for the call, so a resumed conversation reaches it again at
                # the same position.
                awaited = activity_io.AwaitedCall(call_id=str(position), tool=call.name, arguments=shown, digest=digest)
                raise AwaitingApproval(awaited)
            if not decision.approved:
                why = f"rejected by {decision.by}" + (f": {decision.reason}" if decision.reason else "")
                return answer(ToolCallStatus.refused, f"{why[0].upper()}{why[1:]}. The call was not run.", why)
            approved_by = f"approved by {decision.by}"
        return _Pending(position, call, arguments, call.arguments, approved_by, flight(position, call))

    async def _run(self, pending: _Pending) -> _Answer:
        """Run one tool call the step allows (reconciled first if an earlier attempt had it in flight)."""
        call, position, approved_by = pending.call, pending.position, pending.approved_by
        context = ToolContext(
            run_id=self.request.run_id,
            step_id=self.request.step.id,
            revision=self.request.revision,
            attempt=self.attempt,
            workspace=self.workspace,
            execution_id=self.request.execution_id,
            call=position,
        )

        def answer(status: ToolCallStatus, content: str, message: str = "") -> _Answer:
            return _Answer(position, call, pending.arguments, status, content, message)

        output = await reconciled(self.registry, self.inherited, pending.flight, pending.values, context)
        if output is not None:
            approved_by = "; ".join(m for m in (approved_by, RECONCILED) if m)
        else:
            try:
                output = await self.registry.invoke(call.name, pending.values, context)
            except (StratagemError, ToolError) as exc:
                # The model sees the error and may correct its call; the step goes on.
                return answer(ToolCallStatus.error, f"Error from {call.name}: {exc}", str(exc))
        text = output if isinstance(output, str) else json.dumps(output, default=str, ensure_ascii=False)
        if len(text) > MAX_TOOL_RESULT_CHARS:
            text = text[:MAX_TOOL_RESULT_CHARS] + f"\n[cut: {len(text):,} characters in all]"
        return answer(ToolCallStatus.ok, text, approved_by)

    def _answer(self, answer: _Answer) -> None:
        """Record a tool call and give the model its answer, both in the answer's order."""
        status = answer.status
        record = ToolCallRecord(
            call=answer.position,
            tool=answer.call.name,
            status=status,
            arguments=redact(answer.arguments[:1000]),
            message=redact(answer.message),
            attempt=self.attempt,
        )
        # Errors are redacted before the model reads them: it would send them to its provider.
        text = answer.content if status is ToolCallStatus.ok else redact(answer.content)
        reply = Message(
            role="tool", tool_call_id=answer.call.id, content=text, is_error=status is not ToolCallStatus.ok
        )
        insert_answer(self.progress.messages, self.progress.tool_calls, reply, record)


@dataclass(frozen=True)
class _Answer:
    """A tool call's outcome, for the model and the ledger."""

    position: int
    call: ToolCall
    arguments: str
    status: ToolCallStatus
    content: str
    message: str = ""


@dataclass(frozen=True)
class _Pending:
    """A tool call to run, at its position."""

    position: int
    call: ToolCall
    arguments: str
    values: dict[str, Any]
    approved_by: str
    flight: InFlightCall


def _masked(value: Any) -> Any:
    """`value` with anything shaped like a credential masked inside each string on its own."""
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, dict):
        return {key: _masked(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_masked(item) for item in value]
    return value
