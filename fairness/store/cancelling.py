"""Ending a background task for sure.

On Python 3.11, asyncio.wait_for returns its result and drops a cancellation that arrives as the
awaited work completes (fixed in 3.12). redis-py's asyncio client sends every command through
wait_for when it has a socket timeout, so a task cancelled just as a command of its went out
carries on as if it had never been: a loop of such calls then never ends, and whoever waits for
it waits for ever. So a task is cancelled again until it has ended.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

logger = logging.getLogger(__name__)

AGAIN_AFTER_SECONDS = 0.05


async def cancel_and_wait(task: asyncio.Task[Any], again_after: float = AGAIN_AFTER_SECONDS) -> None:
    """Cancel `task` (again, every `again_after` s, until it ends) and wait for it. An error it
    ended with is logged, not raised: whoever ends a task is closing down, and goes on doing so.
    Cancelling the caller cancels only the wait."""
    while not task.done():
        task.cancel()
        await asyncio.wait({task}, timeout=again_after)
    if not task.cancelled() and (error := task.exception()) is not None:
        logger.error("%s ended with an error", task.get_name(), exc_info=error)
