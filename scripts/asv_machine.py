"""Register this machine with asv under a stable name that says what it is.

    python scripts/asv_machine.py [NAME]     # prints the name it registered

See flashbench/infra/machine.py for the naming rule (GPU model in the name on GPU machines).
"""

import sys

from flashbench.infra.machine import register

if __name__ == "__main__":
    print(register(sys.argv[1] if len(sys.argv) > 1 else None))
