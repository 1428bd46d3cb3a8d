"""Team memory quality: scripted teams, their ideal answers, and a deterministic scorer (README.md)."""
