"""Replay: n-step transition writing, a rate-limited FIFO table, and batch prefetching (algorithm.md §1, §2).

numpy + threading only (no jax): tables run inside Ray actors.

Flow: actor → `NStepTransitionAdder` → (`BatchedWriter` →) `Table.insert[_batch]`;
learner ← `PrefetchingIterator` ← `Table.sample`. `FrameStackTable` is a drop-in `Table` for
stacked pixel observations that stores each frame once.
"""

from dmpo.replay.adders import NStepTransitionAdder, n_step_return
from dmpo.replay.dataset import PrefetchingIterator
from dmpo.replay.frames import FrameStackTable
from dmpo.replay.persistence import CheckpointError
from dmpo.replay.rate_limiters import MinSize, RateLimiterTimeout, SampleToInsertRatio
from dmpo.replay.signature import SignatureError, transition_signature
from dmpo.replay.table import SampleBatch, Table, TableClosedError, TableStats
from dmpo.replay.writers import BatchedWriter

__all__ = [
    "BatchedWriter",
    "CheckpointError",
    "FrameStackTable",
    "MinSize",
    "NStepTransitionAdder",
    "PrefetchingIterator",
    "RateLimiterTimeout",
    "SampleBatch",
    "SampleToInsertRatio",
    "SignatureError",
    "Table",
    "TableClosedError",
    "TableStats",
    "n_step_return",
    "transition_signature",
]
