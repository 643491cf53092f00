"""The lowest layer, shared by every other: counters (`counting`), atomic file writes (`files`), the
checksummed pytree checkpoint format (`checkpointing`) and silencers of third-party noise (`quiet`)."""

from dmpo.utils.counting import Counter, CounterLike

__all__ = ["Counter", "CounterLike"]
