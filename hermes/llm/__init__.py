"""Talking to OpenAI-compatible model endpoints. Only client.py imports `openai`."""
