"""The gateway's edge: what platform packages (adapters/) see. Events and the adapter
port, chunking and the Markdown walker, the HTTP server webhooks arrive on, what a
platform package declares, and the registry lines.
"""
