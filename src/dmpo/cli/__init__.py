"""The `dmpo` command: `dmpo.cli.entry` (the executable's entry point, under the run's signal
handling), `dmpo.cli.main` (the subcommands; `dmpo train` itself in `dmpo.cli.train_command`) and
`dmpo.cli.flags` (what the command says about its flags). `python -m dmpo.cli` runs it too."""
