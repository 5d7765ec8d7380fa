"""The workers of a ``distributed`` client, asked afresh. Knows no other module.

``Client.scheduler_info()`` fetches the scheduler's identity and then returns the
client's cached copy, which a periodic callback of the client refreshes every few seconds
with the cluster's totals alone (``"workers"`` empty, distributed 2026.8): a call that
lands between the two returns no workers (seen in CI: a test's list of two workers came
back empty right after a run on both). These ask the scheduler and return its answer.
"""

from __future__ import annotations

from typing import Any

__all__ = ["worker_info"]


def worker_info(client: Any) -> dict[str, dict[str, Any]]:
    """Address -> the scheduler's record of every worker connected now (``nthreads``,
    ``memory_limit``, ...), fetched for this call, never from the client's cache."""
    identity = client.sync(client.scheduler.identity, n_workers=-1)
    return dict(identity.get("workers", {}))
