from pathlib import Path

assert Path("/app/total.txt").read_text().strip() == "500.00"
