"""`python -m dmpo.cli ...` runs the `dmpo` command."""

from dmpo.cli.entry import main

main()
