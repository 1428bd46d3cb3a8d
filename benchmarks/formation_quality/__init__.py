"""Memory formation quality on scripted users, through the real HTTP path, beside mem0 (README.md)."""
