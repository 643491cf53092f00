"""The `dmpo` command (`main`) and what it says about its flags (`flags`)."""

from dmpo.cli.main import main

__all__ = ["main"]
