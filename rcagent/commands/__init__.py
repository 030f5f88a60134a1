"""The `rcagent` subcommands, one module per area (data in, runs, batch and evaluation, benchmarks,
serving) and the options they share; rcagent.cli assembles them into one command group."""
