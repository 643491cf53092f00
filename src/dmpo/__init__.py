"""dmpo: Distributional MPO for continuous control, in JAX."""

__version__ = "0.1.0"
