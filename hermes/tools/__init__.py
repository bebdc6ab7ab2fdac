"""Tools the agent can call (OpenAI function-calling schemas and their executors)."""
