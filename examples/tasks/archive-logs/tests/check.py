from pathlib import Path

inbox = sorted(p.name for p in Path("/app/inbox").iterdir())
archive = sorted(p.name for p in Path("/app/archive").iterdir())
assert inbox == ["data.csv", "todo.txt"], inbox
assert archive == ["a.log", "b.log"], archive
assert Path("/app/archive/a.log").read_text() == "a\n"
