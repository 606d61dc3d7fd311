"""Tools in the chat (issue 36): the MCP servers the user configures, the
host that runs them for the window, the per-chat Tools button and the
approval asked before each call. The host itself is Qt-free (toolhost/)."""
