from pathlib import Path

assert Path("/app/errors.txt").read_text().strip() == "3"
