"""The `dmpo` command: `dmpo.cli.main` (the subcommands and their entry point `main`) and
`dmpo.cli.flags` (what the command says about its flags). `python -m dmpo.cli` runs it too."""
