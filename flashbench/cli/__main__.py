import sys

from flashbench.cli import main

sys.exit(main())
