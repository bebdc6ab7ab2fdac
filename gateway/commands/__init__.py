"""Commands: the command table (one row per command, guards as data) and the
command groups it runs (admin, memory, reminders).
"""
