"""Fair use per API key, user and model (docs/LIMITS.md): `limiter.py` admits or refuses a chat request against
the limits shared by every replica (memory_proxy/store/limits.py), `meter.py` counts what it spent."""
