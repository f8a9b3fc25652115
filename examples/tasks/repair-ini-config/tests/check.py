import configparser
from pathlib import Path

config = configparser.ConfigParser()
config.read_string(Path("/app/service.ini").read_text())
assert config["server"]["port"] == "8080"
assert config["server"].getboolean("debug") is False
assert config["database"]["host"] == "db.internal"
assert config["database"]["name"] == "orders"
