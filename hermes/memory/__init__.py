"""Bounded, curated per-person memory: MEMORY.md (agent notes) and USER.md (user profile)."""
