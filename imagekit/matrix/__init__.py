"""The matrix: matrix.yaml loaded and checked against the compatibility data, expanded into
plans."""
