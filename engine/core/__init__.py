"""What decides: plain Python over plain data, never MLX (docs/ARCHITECTURE.md).

Requests and steps, each lane's scheduler, the director and the router's
policies, the cost model, the memory plan, the prefix trie, and the
vocabulary every room uses (events, sampling parameters, errors, lane specs).
Imports nothing from the other rooms.
"""
