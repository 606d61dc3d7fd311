"""Reading a prompt's KV back from disk or prefilling it (engine/core/restore_cost.py):
plain Python over measured numbers."""

from engine.core.restore_cost import DiskSpeed, restore_pays


def test_a_cpu_always_reads_and_a_fast_gpu_sometimes_prefills():
    speed = DiskSpeed()
    speed.observe(137_000_000, 0.56)  # measured here: 3k tokens' KV in 0.56 s
    assert round(speed.bytes_per_s / 1e6) == 245
    # This CPU prefills ~110 tokens/s: reading 3k tokens wins by far.
    pays, why = restore_pays(2976, 137_000_000, speed, [110.0])
    assert pays and why.startswith("reading 2,976 tokens from disk (~0.56 s) beats")
    # A GPU lane at 10,000 tokens/s prefills them in 0.3 s: it wins.
    pays, why = restore_pays(2976, 137_000_000, speed, [110.0, 10_000.0])
    assert not pays and why.startswith("prefilling 2,976 tokens (~0.30 s) beats")
    # No lane measured yet: read (a disk hit is the better bet on a new machine).
    assert restore_pays(100, 4_600_000, speed, [None])[0]


def test_the_speed_follows_the_restores():
    speed = DiskSpeed(bytes_per_s=1e9)
    speed.observe(100e6, 1.0)  # the first measurement replaces the prior
    assert speed.bytes_per_s == 100e6
    for _ in range(20):
        speed.observe(400e6, 1.0)
    assert 390e6 < speed.bytes_per_s <= 400e6
    speed.observe(0, 1.0)  # nothing read: nothing learned
    speed.observe(1, 0.0)
    assert speed.measured == 21
