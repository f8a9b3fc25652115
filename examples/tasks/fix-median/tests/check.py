import importlib.util

spec = importlib.util.spec_from_file_location("stats", "/app/stats.py")
stats = importlib.util.module_from_spec(spec)
spec.loader.exec_module(stats)
assert stats.median([3, 1, 2]) == 2
assert stats.median([1, 2, 3, 4]) == 2.5
assert stats.median([10, 2]) == 6
assert stats.median([5]) == 5
