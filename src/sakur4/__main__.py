"""`python -m sakur4`: the same command line as the `sakur4` command."""

from sakur4.cli import main

main()
