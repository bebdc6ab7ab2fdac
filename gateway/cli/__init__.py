"""The `hermes` command line."""
