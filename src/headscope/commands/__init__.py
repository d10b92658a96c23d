"""One module per ``headscope`` subcommand (see ``headscope.cli.COMMANDS``)."""
