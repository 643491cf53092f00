"""What a written figure shows, read back from its PNG: the pixels drawn in a curve's colour.

A check of the image's content rather than of its size: a figure whose curves went missing (an empty
axes, curves drawn off-scale, a blank canvas) fails, whatever its dimensions.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np


def colour_pixels(path: str | Path, colour: str, tolerance: float = 0.02) -> int:
    """How many pixels of the PNG at `path` have the matplotlib colour `colour` ("C0", "#1f77b4")."""
    import matplotlib.colors
    import matplotlib.image

    image = matplotlib.image.imread(path)[..., :3]
    target = np.asarray(matplotlib.colors.to_rgb(colour))
    return int(np.all(np.abs(image - target) <= tolerance, axis=-1).sum())


def assert_curves_drawn(path: str | Path, colours: list[str], *, min_width_share: float = 0.3) -> None:
    """Each colour covers at least `min_width_share` of the image's width in pixels: a curve across
    an axes, more than its legend sample (a few dozen pixels) could account for."""
    import matplotlib.image

    width = matplotlib.image.imread(path).shape[1]
    counts = {colour: colour_pixels(path, colour) for colour in colours}
    assert all(count >= min_width_share * width for count in counts.values()), (counts, width)
