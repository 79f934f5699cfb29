import sys
from pathlib import Path

# Tests import their numpy references (kernel_reference.py) as plain modules.
sys.path.insert(0, str(Path(__file__).parent))
