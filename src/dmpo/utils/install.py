"""How to install an optional part of dmpo: the distribution's name on the package registry is
`dmpo-jax` (the import name and the command stay `dmpo`; the registry's `dmpo` is another project)."""

from __future__ import annotations

__all__ = ["DISTRIBUTION", "install_hint"]

DISTRIBUTION = "dmpo-jax"


def install_hint(extra: str) -> str:
    """`pip install 'dmpo-jax[extra]' (from a checkout: pip install -e '.[extra]')`."""
    return f"pip install '{DISTRIBUTION}[{extra}]' (from a checkout: pip install -e '.[{extra}]')"
