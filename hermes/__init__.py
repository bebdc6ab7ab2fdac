"""The agent: memory, state, tools and the LLM loop. Knows nothing about platforms."""
