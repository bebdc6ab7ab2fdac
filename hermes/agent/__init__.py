"""The agent: frozen prompt, tool-calling turn loop, compression, memory review."""
