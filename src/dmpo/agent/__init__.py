"""The single-process DMPO agent (`core`) and its folder format for `DMPO.save` / `DMPO.load` (`files`)."""

from dmpo.agent.core import DMPO

__all__ = ["DMPO"]
