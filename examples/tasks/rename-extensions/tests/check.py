from pathlib import Path

photos = Path("/app/photos")
names = sorted(p.name for p in photos.iterdir())
assert names == ["beach.jpg", "cat.jpg", "city.jpg", "notes.txt"], names
assert (photos / "beach.jpg").read_text() == "b\n"
assert (photos / "notes.txt").read_text() == "keep me\n"
