import sys

from autoplan.cli.main import main

sys.exit(main())
