"""Loading, choosing and downloading models; the engine's signals on the GUI thread."""
