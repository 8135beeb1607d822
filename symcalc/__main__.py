import sys

from symcalc.cli import main

sys.exit(main())
