"""Secrets (API keys) in the OS keyring, never in the database or a log.

The `keyring` package picks the system's store: Keychain on macOS, the
Secret Service (GNOME Keyring, KWallet) on Linux desktops, Credential
Manager on Windows. Where there is none (a headless Linux, CI) a key lives
for this session only, and `persistent()` says so, for the user to be told.
Used by the Local server's key; remote lanes' keys will use it too.
"""

from __future__ import annotations

import sys

SERVICE = "Tandem"
_session: dict[str, str] = {}  # keys kept in memory where no keyring exists


def _keyring():
    try:
        import keyring
        from keyring.backends import fail

        backend = keyring.get_keyring()
        if isinstance(backend, fail.Keyring) and sys.platform == "darwin":
            backend = _keychain(keyring)
        if backend is None or isinstance(backend, fail.Keyring):
            return None
        return keyring
    except Exception:  # not installed, or a backend that fails to load
        return None


def _keychain(keyring):
    """macOS: the Keychain through keyring's own macOS backend, where
    keyring's discovery found none (a bundle whose entry points it could
    not read); None if it cannot be used either."""
    from keyring.backends import macOS

    try:
        backend = macOS.Keyring()
        backend.priority  # noqa: B018 (raises where the Keychain cannot be used)
    except Exception:
        return None
    keyring.set_keyring(backend)
    return backend


def persistent() -> bool:
    """Whether keys outlive this session (an OS keyring is there)."""
    return _keyring() is not None


def backend_name() -> str:
    ring = _keyring()
    if ring is None:
        return "none"
    from keyring.backends import macOS

    backend = ring.get_keyring()
    return "macOS Keychain" if isinstance(backend, macOS.Keyring) else type(backend).__name__


def where(session_only: str) -> str:
    """Where keys are kept, for a settings dialog: the OS keyring, or this
    session only (`session_only` says what that means for this key)."""
    if persistent():
        return f"Kept in the system's keyring ({backend_name()}), never in Tandem's files."
    return ("No system keyring here (Secret Service, Keychain): the key is kept for this "
            f"session only; {session_only}")


def get(name: str) -> str | None:
    """The key called `name`, or None."""
    if name in _session:
        return _session[name]
    ring = _keyring()
    if ring is None:
        return None
    try:
        return ring.get_password(SERVICE, name)
    except Exception:  # a locked or broken keyring: as if none were stored
        return None


def put(name: str, secret: str) -> bool:
    """Keep `secret` as `name`. True if it is in the OS keyring; False if it
    is kept for this session only (no keyring, or the keyring refused)."""
    ring = _keyring()
    if ring is not None:
        try:
            ring.set_password(SERVICE, name, secret)
            _session.pop(name, None)
            return True
        except Exception:
            pass
    _session[name] = secret
    return False


def forget(name: str) -> None:
    _session.pop(name, None)
    ring = _keyring()
    if ring is not None:
        try:
            ring.delete_password(SERVICE, name)
        except Exception:  # not there, or the keyring refused
            pass
