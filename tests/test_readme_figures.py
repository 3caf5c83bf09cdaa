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
