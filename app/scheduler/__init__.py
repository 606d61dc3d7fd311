"""The live scheduler view: lanes, timeline, plots, routing ledger."""
