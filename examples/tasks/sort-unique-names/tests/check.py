from pathlib import Path

lines = Path("/app/sorted.txt").read_text().split()
assert lines == ["alice", "bob", "carol", "dave", "mallory"], lines
