"""The `autoplan` command line: a thin layer of subcommands (parse, load, call, print)."""
