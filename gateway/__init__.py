"""Transport-agnostic runtime: config, routing, commands, the CLI."""
