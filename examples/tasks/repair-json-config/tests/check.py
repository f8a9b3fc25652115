import json
from pathlib import Path

config = json.loads(Path("/app/config.json").read_text())
assert config == {"name": "worker", "timeout": 30, "retries": 3}, config
