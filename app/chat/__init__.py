"""A chat tab: transcript, composer, attachments, requests to the engine, files."""
