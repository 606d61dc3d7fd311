"""Tandem's MCP host (issue 36): tool servers the user adds (stdio commands,
Streamable HTTP URLs), their tools listed and called through the official
`mcp` SDK, and the loop that lets a model call them, one approved call at a
time. Qt-free: the app and `tandem generate --mcp` use the same code. The
package is not called `mcp` (that is the SDK) nor `tools` (the repo's
scripts)."""
