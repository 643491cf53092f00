"""The lowest layer, shared by every other: counters (`counting`), atomic writes of files and folders
(`files`), the header every dmpo file carries (`formats`), the checksummed pytree checkpoint file
(`checkpointing`), every seed of a run (`seeds`), spelling suggestions (`spelling`) and silencers of
third-party noise (`quiet`)."""

from dmpo.utils.counting import Counter, CounterLike

__all__ = ["Counter", "CounterLike"]
