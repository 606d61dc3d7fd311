"""The local API server, remote lanes and the keys they use."""
