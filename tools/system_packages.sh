#!/usr/bin/env bash
# The system libraries Tandem needs on Debian/Ubuntu, and their installation.
#
#   tools/system_packages.sh          what is missing, installed (make run / make test)
#   tools/system_packages.sh --all    every package, installed after apt-get update (.ci/run)
#   tools/system_packages.sh --list   the packages, one a line
#
# Without --all it installs only when a library is missing: apt-get as root,
# through sudo where sudo needs no password or can ask for it (a terminal);
# otherwise it prints the one command to run and exits 1, before any venv is
# made. Nothing to do off Linux (macOS has Accelerate). Everything present:
# it prints nothing and asks nothing.
set -euo pipefail

# package  what shows it is installed (a library's soname, or a file's path).
# OpenBLAS for MLX's CPU backend (engine/runtime/blas.py loads the first of
# these sonames; without it matrix products are about 50x slower); the
# libraries offscreen Qt loads; the xcb libraries Qt's desktop plugin needs
# (a window on an X11/XWayland desktop, and what `make bundle` ships).
PACKAGES="
libopenblas0-pthread libopenblas.so.0|libopenblasp.so.0|libopenblas.so
libgl1               libGL.so.1
libegl1              libEGL.so.1
libxkbcommon0        libxkbcommon.so.0
libfontconfig1       libfontconfig.so.1
libdbus-1-3          libdbus-1.so.3
libglib2.0-0         libglib-2.0.so.0
fonts-dejavu-core    /usr/share/fonts/truetype/dejavu/DejaVuSans.ttf
libxcb-icccm4        libxcb-icccm.so.4
libxcb-keysyms1      libxcb-keysyms.so.1
libxcb-cursor0       libxcb-cursor.so.0
libxcb-image0        libxcb-image.so.0
libxcb-render-util0  libxcb-render-util.so.0
libxcb-shape0        libxcb-shape.so.0
libxcb-xkb1          libxcb-xkb.so.1
libxkbcommon-x11-0   libxkbcommon-x11.so.0
"

packages() { awk 'NF { print $1 }' <<<"$PACKAGES"; }

# The sonames the dynamic linker knows (its cache; ldconfig is in /sbin,
# which a user's PATH may lack).
known_libraries() {
    local ldconfig
    ldconfig=$(command -v ldconfig || echo /sbin/ldconfig)
    "$ldconfig" -p 2>/dev/null | awk '/=>/ { print $1 }' || true
}

missing() {
    local known package shown name found
    known=$(known_libraries)
    while read -r package shown; do
        [ -n "$package" ] || continue
        found=
        for name in ${shown//|/ }; do
            if [[ $name == /* ]]; then
                [ -e "$name" ] && found=1
            elif grep -qxF "$name" <<<"$known"; then
                found=1
            fi
        done
        [ -n "$found" ] || echo "$package"
    done <<<"$PACKAGES"
}

main() {
    local all= wanted sudo= command
    case "${1:-}" in
        --list) packages; return ;;
        --all) all=1 ;;
        "") ;;
        *) echo "usage: $0 [--all | --list]" >&2; return 2 ;;
    esac
    [ "$(uname -s)" = Linux ] || return 0
    if [ -n "$all" ]; then
        wanted=$(packages)
    else
        wanted=$(missing)
        [ -n "$wanted" ] || return 0
    fi
    wanted=$(echo $wanted)  # one line
    if ! command -v apt-get >/dev/null; then
        [ -n "$all" ] && return 0
        echo "Tandem needs system libraries this machine lacks (the Debian/Ubuntu" \
             "packages: $wanted). Install their equivalents with your package manager;" \
             "OpenBLAS above all (libopenblas.so.0), without which MLX runs about 50x" \
             "slower. Then run make again." >&2
        return 1
    fi
    command="apt-get update && apt-get install -y --no-install-recommends $wanted"
    if [ "$(id -u)" -ne 0 ]; then
        if command -v sudo >/dev/null && { sudo -n true 2>/dev/null || [ -t 0 ]; }; then
            sudo=sudo
        else
            echo "Tandem needs these system packages first (OpenBLAS: without it MLX" \
                 "runs about 50x slower): $wanted. Run this, then make again:" >&2
            echo "    sudo sh -c '$command'" >&2
            return 1
        fi
    fi
    echo "Installing the system packages Tandem needs: $wanted${sudo:+ (through sudo," \
         "which may ask for your password)}" >&2
    $sudo env DEBIAN_FRONTEND=noninteractive apt-get update -qq
    $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
        --no-install-recommends $wanted >/dev/null
}

main "$@"
