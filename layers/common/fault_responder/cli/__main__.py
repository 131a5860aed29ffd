"""`python -m fault_responder.cli`: the same as the `fault-responder` command."""

import sys

from fault_responder.cli.main import main

sys.exit(main())
