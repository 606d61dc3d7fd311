"""Build the Tandem bundle: `make bundle` runs this.

1. Render the icons from resources/icon.svg (packaging/make_icons.py).
2. Run PyInstaller on packaging/tandem.spec -> dist/Tandem/ (Linux onedir) or
   dist/Tandem.app (macOS).
3. Linux: add a .desktop file and a script that installs it for the user.
4. Print the bundle's size.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DIST = ROOT / "dist"
WORK = ROOT / "build" / "pyinstaller"

DESKTOP = """[Desktop Entry]
Type=Application
Name=Tandem
GenericName=Local AI chat
Comment=Chat with local language models; CPU and GPU work in tandem
Exec="{exe}" %U
Icon={icon}
Terminal=false
Categories=Utility;Development;
StartupWMClass=Tandem
"""

INSTALL = """#!/bin/sh
# Adds Tandem to your desktop's application menu, pointing at this folder.
# Run it again if you move the folder.
set -e
here="$(cd "$(dirname "$0")" && pwd)"
apps="${XDG_DATA_HOME:-$HOME/.local/share}/applications"
mkdir -p "$apps"
sed -e "s|@EXE@|$here/Tandem|" -e "s|@ICON@|$here/_internal/resources/tandem-256.png|" \\
    "$here/tandem.desktop" > "$apps/tandem.desktop"
chmod +x "$apps/tandem.desktop"
echo "Installed $apps/tandem.desktop"
"""


def folder_size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink())


def main() -> int:
    subprocess.run([sys.executable, str(ROOT / "packaging" / "make_icons.py"),
                    str(ROOT / "build" / "icons")], check=True)
    subprocess.run([sys.executable, "-m", "PyInstaller", "--noconfirm", "--clean",
                    "--log-level", "WARN", "--distpath", str(DIST), "--workpath", str(WORK),
                    str(ROOT / "packaging" / "tandem.spec")], check=True, cwd=ROOT)
    if sys.platform == "darwin":
        bundle = DIST / "Tandem.app"
    else:
        bundle = DIST / "Tandem"
        (bundle / "tandem.desktop").write_text(DESKTOP.format(exe="@EXE@", icon="@ICON@"))
        script = bundle / "install-desktop-entry.sh"
        script.write_text(INSTALL)
        script.chmod(0o755)
    size = folder_size(bundle)
    print(f"bundle: {bundle} ({size / 2**20:.0f} MiB)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
