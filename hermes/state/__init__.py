"""state.db: users, identities, sessions, messages, memory events, full-text search.

All SQL of the project lives under this package.
"""
