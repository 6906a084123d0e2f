import sys

from memcairn.entry import main

sys.exit(main())
