import sys

from tracekit.cli.main import main

sys.exit(main())
