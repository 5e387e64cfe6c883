"""One call at a time per idempotency key, for the tools whose attempts the workflow counts (a
reconcile check, or irreversible): level 10.

An attempt that timed out, or whose activity was cancelled, has not necessarily stopped: a
blocking tool runs in a thread, which nothing can interrupt, and it may still make its effect
after the next attempt's reconcile check looked and found nothing; the next attempt would then
make it a second time. So such a tool's blocking call runs in a thread this module tracks by the
call's idempotency key, and before a check or a call of the same key starts in this worker
process, every earlier one still running is waited for. A wait longer than the attempt's time
limit ends that attempt as of unknown outcome, and the workflow's attempts end in doubt if it
never stops (workflows/attempts.py): a person decides, rather than a blind second call.

An async tool needs no thread: cancelling the attempt cancels the tool's coroutine. An attempt
still running in ANOTHER worker process (alive, but cut off from the server) cannot be seen from
here: RELIABILITY.md says what a tool must do about that (bound its own call within the step's
time limit).

Every other blocking tool, and every blocking check, runs in the same threads, untracked
(`blocking`): the event loop's default executor has min(32, CPUs + 4) threads, 6 on a 2-CPU
machine, fewer than the calls of one model answer an llm step may run at once (`max_parallel`, up
to 256), so an answer's seventh blocking call there waited for one of the first six to end.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import functools
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

# As many as one llm step may run calls at once (`max_parallel`'s limit): a thread starts only when
# a call finds none idle.
_THREADS = ThreadPoolExecutor(max_workers=256, thread_name_prefix="stratagem-tool")
_lock = threading.Lock()
_running: dict[str, set[Future[Any]]] = {}


def _forget(key: str, future: Future[Any]) -> None:
    with _lock:
        calls = _running.get(key)
        if calls is not None:
            calls.discard(future)
            if not calls:
                del _running[key]


async def in_thread(key: str, function: Callable[..., Any], /, **kwargs: Any) -> Any:
    """Call a blocking function in a thread held under `key` until the thread returns, however
    the awaiting attempt ends."""
    call = functools.partial(contextvars.copy_context().run, functools.partial(function, **kwargs))
    future = _THREADS.submit(call)
    with _lock:
        _running.setdefault(key, set()).add(future)
    future.add_done_callback(functools.partial(_forget, key))
    return await asyncio.wrap_future(future)


async def blocking(function: Callable[..., Any], /, **kwargs: Any) -> Any:
    """Call a blocking function in one of the tools' threads, as `asyncio.to_thread` would in the
    event loop's default executor (the caller's context goes with it)."""
    call = functools.partial(contextvars.copy_context().run, functools.partial(function, **kwargs))
    return await asyncio.wrap_future(_THREADS.submit(call))


def running(key: str) -> int:
    """How many calls under `key` are still running in this process."""
    with _lock:
        return len(_running.get(key, ()))


async def settled(key: str) -> None:
    """Wait until no earlier call under `key` runs in this process (their outcome is theirs)."""
    with _lock:
        earlier = list(_running.get(key, ()))
    if earlier:  # waited for in a thread: their results and errors stay theirs, and a cancel leaves them be
        await asyncio.to_thread(concurrent.futures.wait, earlier)
