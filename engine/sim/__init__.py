"""A virtual-time SIMULATION of Tandem's lanes driving the real router.

Simulated lanes follow cost profiles (profiles.json), not hardware. Use it for
deterministic tests of routing logic and for what-if benchmarks; its numbers
are never measured speed.
"""

from .profiles import PROFILES, load_profile
from .simulator import SimResult, Simulation, TraceRequest
from .workload import Tab, Turn, chat_workload

__all__ = ["PROFILES", "SimResult", "Simulation", "Tab", "TraceRequest", "Turn", "chat_workload",
           "load_profile"]
