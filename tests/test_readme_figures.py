"""The README quotes the tools: its accuracy table is what `autoplan validate --markdown` prints.
Regenerate it with that command after a change to the cost model or the published runs."""
import re
from pathlib import Path

from autoplan.cli.main import main

README = Path(__file__).resolve().parents[1] / "README.md"


def test_readme_accuracy_table_is_what_validate_prints(capsys):
    block = re.search(r"<!-- autoplan validate --markdown: begin[^>]*-->\n(.*?)<!-- autoplan validate --markdown: end -->",
                      README.read_text(), re.S)
    assert block, "README lost its `autoplan validate --markdown` block"
    assert main(["validate", "--markdown"]) == 0
    printed = capsys.readouterr().out
    assert "| **bf16/fp16 rows** |" in printed and "A single constant MFU" in printed
    assert block.group(1) == printed, "README figures differ from `autoplan validate --markdown`; paste its output"


def test_readme_cluster_example_is_what_cluster_prints(capsys):
    """The README's `autoplan cluster` example is trimmed, never edited: each line it shows is a line
    of what the command prints today."""
    block = re.search(r"\n( *)\$ autoplan (cluster [^\n]*)\n(.*?)\n\1```", README.read_text(), re.S)
    assert block, "README lost its `autoplan cluster` example"
    indent = len(block.group(1))
    assert main(block.group(2).split()) == 0
    printed = set(capsys.readouterr().out.splitlines())
    shown = [line[indent:] for line in block.group(3).splitlines()]
    assert len(shown) >= 8
    missing = [line for line in shown if line not in printed]
    assert not missing, f"README cluster example lines not printed by the command now: {missing}"
