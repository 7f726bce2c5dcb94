"""Following upstream: package indexes, wheel metadata and the refresh of the matrix."""
