"""`python -m dmpo.cli ...` runs the `dmpo` command."""

from dmpo.cli import main

main()
