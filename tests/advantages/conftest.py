import sys
from pathlib import Path

# reference_loops / adv_tables are plain helper modules next to the tests.
sys.path.insert(0, str(Path(__file__).parent))
