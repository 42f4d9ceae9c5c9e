"""The tray icon per state, rendered with Pillow from ``assets/icon.png``.

States: idle (grey), connected (blue), attention (amber, with the pending count as a badge),
paused (grey with pause bars), error (red with "!"). Rendered at the size asked for with a
high-quality downscale, so it stays crisp from 16 to 64 px.
"""

from __future__ import annotations

import functools
import os
from enum import StrEnum

from PIL import Image, ImageDraw, ImageFont

from omp_a2a_bridge.assets import ASSETS_DIR


class IconState(StrEnum):
    IDLE = "idle"
    CONNECTED = "connected"
    ATTENTION = "attention"
    PAUSED = "paused"
    ERROR = "error"


COLORS = {
    IconState.IDLE: (110, 116, 128),
    IconState.CONNECTED: (40, 100, 220),
    IconState.ATTENTION: (230, 140, 0),
    IconState.PAUSED: (110, 116, 128),
    IconState.ERROR: (200, 40, 40),
}
BADGE = (200, 30, 30)
WORK = 256  # draw at this size, then downscale


@functools.cache
def _glyph() -> Image.Image:
    return Image.open(os.path.join(ASSETS_DIR, "icon.png")).convert("RGBA").resize((WORK, WORK))


def _font(px: int) -> ImageFont.ImageFont | ImageFont.FreeTypeFont:
    try:
        return ImageFont.load_default(size=px)
    except TypeError:  # Pillow without FreeType
        return ImageFont.load_default()


def state_for(sessions: int, pending: int, paused: bool, error: bool) -> IconState:
    if error:
        return IconState.ERROR
    if pending:
        return IconState.ATTENTION
    if paused:
        return IconState.PAUSED
    return IconState.CONNECTED if sessions else IconState.IDLE


@functools.lru_cache(maxsize=64)
def render_icon(state: IconState, count: int = 0, size: int = 64) -> Image.Image:
    """An RGBA image of ``size`` x ``size`` for ``state`` (``count`` = pending calls)."""
    img = Image.new("RGBA", (WORK, WORK), (0, 0, 0, 0))
    d = ImageDraw.Draw(img)
    d.rounded_rectangle((0, 0, WORK - 1, WORK - 1), radius=56, fill=COLORS[state] + (255,))
    glyph = _glyph()
    img.alpha_composite(glyph.resize((200, 200), Image.Resampling.LANCZOS), (28, 20))
    if state is IconState.PAUSED:
        d.rounded_rectangle((150, 140, 240, 240), radius=18, fill=(40, 40, 40, 255))
        for x in (168, 204):
            d.rectangle((x, 158, x + 18, 222), fill=(255, 255, 255, 255))
    elif state is IconState.ERROR:
        d.ellipse((140, 130, 250, 240), fill=(255, 255, 255, 255))
        d.rectangle((187, 148, 203, 200), fill=COLORS[state] + (255,))
        d.rectangle((187, 210, 203, 226), fill=COLORS[state] + (255,))
    elif state is IconState.ATTENTION and count > 0:
        text = str(count) if count < 100 else "99+"
        radius = 62 if len(text) == 1 else 72
        cx, cy = WORK - radius, WORK - radius
        d.ellipse((cx - radius, cy - radius, WORK, WORK), fill=(*BADGE, 255))
        font = _font(100 if len(text) == 1 else 76 if len(text) == 2 else 56)
        d.text((cx, cy + 2), text, fill=(255, 255, 255, 255), font=font, anchor="mm")
    if size == WORK:
        return img
    return img.resize((size, size), Image.Resampling.LANCZOS)
