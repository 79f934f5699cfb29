import sys
from pathlib import Path

# Tests import their numpy references (kernel_reference.py) as plain modules.
sys.path.insert(0, str(Path(__file__).parent))
# The export/ tools (training-side, not installed) live at the repository root. Appended,
# not prepended: `pyfastdec` must resolve to the installed package, which carries the
# compiled extension, not to the source folder of the same name.
sys.path.append(str(Path(__file__).resolve().parents[1]))
