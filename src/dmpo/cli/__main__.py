"""`python -m dmpo.cli ...` runs the `dmpo` command."""


from dmpo.cli.main import main

main()
