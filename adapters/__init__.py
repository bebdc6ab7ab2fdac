"""Platform adapters: the only place that imports a platform SDK."""
