"""The Kubernetes manifests under ``deploy/`` are valid Kubernetes, checked offline.

kubernetes-validate checks each document against the Kubernetes 1.37 OpenAPI schemas
(strict: an unknown field is an error). This is all the checking they get here: the
machines rollgym is developed on have no Kubernetes, so they were never applied.
"""

from __future__ import annotations

from pathlib import Path

import kubernetes_validate
import pytest
import yaml

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
MANIFESTS = sorted(DEPLOY.rglob("*.yaml"))


def documents() -> list[tuple[str, dict]]:
    out = []
    for path in MANIFESTS:
        for doc in yaml.safe_load_all(path.read_text()):
            if doc:
                out.append((f"{path.name}:{doc['kind']}/{doc['metadata']['name']}", doc))
    return out


def test_there_are_manifests() -> None:
    kinds = {doc["kind"] for _, doc in documents()}
    assert {"StatefulSet", "Deployment", "Service", "PersistentVolumeClaim"} <= kinds


@pytest.mark.parametrize(("name", "doc"), documents(), ids=[n for n, _ in documents()])
def test_each_document_is_valid_kubernetes(name: str, doc: dict) -> None:
    kubernetes_validate.validate(doc, "1.37.0", strict=True)


def test_the_router_and_the_servers_agree_on_where_the_data_lives() -> None:
    docs = {d["metadata"]["name"]: d for _, d in documents()}
    router = docs["rollgym-router"]["spec"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e.get("value") for e in router["env"]}
    workers = docs["ray-worker"]["spec"]["template"]["spec"]["containers"][0]
    mounts = {m["mountPath"] for m in workers["volumeMounts"]}
    assert env["ROLLGYM_CLUSTER__DATA_DIR"].startswith(tuple(mounts))
    assert int(env["ROLLGYM_CLUSTER__SERVERS"]) <= docs["ray-worker"]["spec"]["replicas"]
