"""Memory providers: at most one external recall layer beside the built-in stores."""
