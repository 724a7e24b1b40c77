"""`python -m vaswani.cli ...`, as torchrun starts it: `torchrun --nproc_per_node=2 -m vaswani.cli train ...`."""

import sys

from vaswani.cli import main

sys.exit(main())
