from pathlib import Path

root = Path("/app/project")
for name in ("src", "tests", "docs"):
    readme = root / name / "README.md"
    assert readme.is_file(), readme
    assert readme.read_text().splitlines()[0].strip() == name, readme
