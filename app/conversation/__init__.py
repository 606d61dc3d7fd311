"""The conversation as plain data, no Qt: messages, versions, attachments, thinking."""
