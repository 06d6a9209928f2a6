"""Write an animated GIF from a matplotlib figure, atomically (used by ``scaling`` and ``causal-mask``)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
from PIL import Image

from gradflow.io import atomic_write


def save_gif(fig, draw: Callable[[int], None], frames: Sequence[int], path: str, *, ms_per_frame: int = 700,
             last_frame_ms: int = 2000, dpi: int = 100) -> int:
    """Call ``draw(i)`` for each ``i`` in ``frames``, grab the canvas and write a looping GIF to ``path``.

    The figure keeps its size for every frame (no tight bbox), so all frames have one shape.
    The last frame is held for ``last_frame_ms``. Returns the number of frames written.
    """
    fig.set_dpi(dpi)
    images = []
    for i in frames:
        draw(i)
        fig.canvas.draw()
        rgba = np.asarray(fig.canvas.buffer_rgba())
        images.append(Image.fromarray(rgba[..., :3].copy()).convert("P", palette=Image.Palette.ADAPTIVE))
    if not images:
        raise ValueError("save_gif: no frames")
    durations = [ms_per_frame] * (len(images) - 1) + [last_frame_ms]
    atomic_write(path, lambda f: images[0].save(f, format="GIF", save_all=True, append_images=images[1:],
                                                duration=durations, loop=0))
    return len(images)
