from pathlib import Path

lines = Path("/app/emails.txt").read_text().split()
assert lines == ["alice@example.com", "bob@example.org", "carol.smith@mail.example.net"], lines
