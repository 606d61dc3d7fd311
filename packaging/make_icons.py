"""Render resources/icon.svg to the icon files a bundle needs.

Run: python packaging/make_icons.py OUT_DIR
Writes OUT_DIR/tandem-<size>.png (16..1024) and, on macOS, OUT_DIR/Tandem.icns
(through `iconutil`, part of every macOS install).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SVG = ROOT / "resources" / "icon.svg"
SIZES = (16, 32, 64, 128, 256, 512, 1024)


def render_pngs(out: Path) -> dict[int, Path]:
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from PySide6.QtCore import Qt
    from PySide6.QtGui import QGuiApplication, QImage, QPainter
    from PySide6.QtSvg import QSvgRenderer

    app = QGuiApplication.instance() or QGuiApplication([])  # noqa: F841 (needed by QPainter)
    renderer = QSvgRenderer(str(SVG))
    if not renderer.isValid():
        raise SystemExit(f"cannot read {SVG}")
    out.mkdir(parents=True, exist_ok=True)
    written = {}
    for size in SIZES:
        image = QImage(size, size, QImage.Format_ARGB32)
        image.fill(Qt.transparent)
        painter = QPainter(image)
        painter.setRenderHint(QPainter.Antialiasing)
        renderer.render(painter)
        painter.end()
        path = out / f"tandem-{size}.png"
        if not image.save(str(path)):
            raise SystemExit(f"cannot write {path}")
        written[size] = path
    return written


def make_icns(pngs: dict[int, Path], out: Path) -> Path:
    """macOS: an .iconset folder (name@2x pairs) turned into .icns by iconutil."""
    iconset = out / "Tandem.iconset"
    shutil.rmtree(iconset, ignore_errors=True)
    iconset.mkdir()
    for size in (16, 32, 128, 256, 512):
        shutil.copy(pngs[size], iconset / f"icon_{size}x{size}.png")
        shutil.copy(pngs[size * 2], iconset / f"icon_{size}x{size}@2x.png")
    icns = out / "Tandem.icns"
    subprocess.run(["iconutil", "-c", "icns", str(iconset), "-o", str(icns)], check=True)
    return icns


def main() -> int:
    out = Path(sys.argv[1] if len(sys.argv) > 1 else ROOT / "build" / "icons")
    pngs = render_pngs(out)
    if sys.platform == "darwin":
        make_icns(pngs, out)
    print(f"icons in {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
