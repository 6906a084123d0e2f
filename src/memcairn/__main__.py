import sys

from memcairn.cli.entry import main

sys.exit(main())
