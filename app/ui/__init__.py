"""Look and basics every room uses: theme, plain text, code highlighting, paths."""
