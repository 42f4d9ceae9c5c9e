"""Draw assets/icon.png, the base image the tray icon is rendered from (run once, committed).

A white "bridge" glyph on transparent ground: two pillars joined by an arch. The tray colours
it per state; keeping it as a separate asset lets a designer replace it without code changes.
"""

from PIL import Image, ImageDraw

SIZE = 256


def main() -> None:
    img = Image.new("RGBA", (SIZE, SIZE), (0, 0, 0, 0))
    d = ImageDraw.Draw(img)
    w = 22
    d.arc((40, 70, 216, 246), start=180, end=360, fill="white", width=w)  # the arch
    d.line((28, 158, 228, 158), fill="white", width=w)  # the deck
    for x in (52, 204):  # the pillars
        d.rounded_rectangle((x - 14, 110, x + 14, 226), radius=8, fill="white")
    img.save("assets/icon.png")


if __name__ == "__main__":
    main()
