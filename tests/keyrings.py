"""An OS keyring stand-in: the suite's default (tests/conftest.py), so no
test reads or writes the user's keyring, nor one another worker shares."""

from keyring.backend import KeyringBackend


class MemoryKeyring(KeyringBackend):
    """A keyring in this process's memory."""

    priority = 1

    def __init__(self):
        super().__init__()
        self.saved: dict[tuple[str, str], str] = {}

    def get_password(self, service, name):
        return self.saved.get((service, name))

    def set_password(self, service, name, secret):
        self.saved[(service, name)] = secret

    def delete_password(self, service, name):
        self.saved.pop((service, name), None)
