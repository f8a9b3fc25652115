import importlib.util

spec = importlib.util.spec_from_file_location("paging", "/app/paging.py")
paging = importlib.util.module_from_spec(spec)
spec.loader.exec_module(paging)
assert paging.page_count(11, 5) == 3
assert paging.page_count(10, 5) == 2
assert paging.page_count(0, 5) == 0
assert paging.page_count(1, 5) == 1
