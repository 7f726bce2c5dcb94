"""Building images: rendering, build contexts, builders and the build use case."""
