"""`python -m trainplane` is the `trainplane` command."""

from trainplane.cli import main

main()
