"""python -m pyfastdec.convert: the converters' command line (pyfastdec/convert/command.py)."""
import sys

from pyfastdec.convert.command import main

sys.exit(main())
