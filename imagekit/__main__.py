"""`python -m imagekit` runs the CLI."""

from imagekit.cli import main

main()
