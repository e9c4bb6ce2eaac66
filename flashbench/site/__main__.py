import sys

from flashbench.site.publish import main

sys.exit(main())
