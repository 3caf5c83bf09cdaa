"""Run the CLI in-process as a user would, for tests: (exit code, stdout, stderr)."""
from autoplan.cli.main import main


def run_cli(capsys, *argv) -> tuple:
    """`autoplan ARGV...` through autoplan.cli.main; argparse's own exits count as exit codes."""
    try:
        code = main([str(a) for a in argv])
    except SystemExit as exc:
        code = exc.code
    out, err = capsys.readouterr()
    return code, out, err
