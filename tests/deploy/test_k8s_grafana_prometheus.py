"""deploy/: the Prometheus alert rules (promtool's own unit tests), the Grafana dashboard and
the Kubernetes manifests (the Kubernetes schemas; KEDA's CRD schema, vendored under schemas/),
each checked against what ovstream really serves and names: every metric a rule or panel
reads is in a real /metrics, every stream, group and queue KEDA watches is one ovstream uses,
every command a container or probe runs parses as an ovstream command."""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import httpx
import jsonschema
import kubernetes_validate
import pytest
import yaml

from core.config import Settings
from tests.helpers.rpc import TEST_SETTINGS
from tests.rpc.test_assemble import oc_turns
from workers.cli import build_parser, command_in
from workers.dev.fake_ov.app import FakeOV
from workers.rpc.app import create_app

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
SCHEMAS = Path(__file__).parent / "schemas"
METRIC = re.compile(r"\bovstream_[a-z_]+\b")
KEDA_METADATA = {
    # what KEDA's scalers read (pkg/scalers/redis_streams_scaler.go, redis_scaler.go,
    # metrics_api_scaler.go and the authentication.Config it embeds)
    "metrics-api": {
        "url", "format", "valueLocation", "targetValue", "activationTargetValue", "unsafeSsl",
        "aggregateFromKubeServiceEndpoints", "aggregationType", "timeout", "authMode", "authModes",
        "method", "keyParamName",
    },
    "redis-streams": {
        "stream", "consumerGroup", "lagCount", "activationLagCount", "pendingEntriesCount",
        "streamLength", "databaseIndex", "enableTLS", "address", "addressFromEnv", "host", "port",
        "username", "usernameFromEnv", "passwordFromEnv", "unsafeSsl",
    },
    "redis": {
        "listName", "listLength", "activationListLength", "databaseIndex", "enableTLS", "address",
        "addressFromEnv", "host", "port", "username", "usernameFromEnv", "passwordFromEnv", "unsafeSsl",
    },
}  # fmt: skip


def _promtool() -> str:
    found = shutil.which("promtool")
    if found:
        return found
    if os.environ.get("OVSTREAM_REQUIRE_PROMTOOL") == "1":
        pytest.fail("promtool is required (scripts/bootstrap.sh browser installs Debian's prometheus)")
    pytest.skip("promtool not installed (scripts/bootstrap.sh browser)")


def _promtool_run(*args: str, cwd: Path) -> str:
    done = subprocess.run([_promtool(), *args], cwd=cwd, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def _rules() -> list[dict[str, Any]]:
    doc = yaml.safe_load((DEPLOY / "prometheus" / "alerts.yml").read_text())
    return [rule for group in doc["groups"] for rule in group["rules"]]


def _dashboard() -> dict[str, Any]:
    data: dict[str, Any] = json.loads((DEPLOY / "grafana" / "ovstream.json").read_text())
    return data


def _panel_exprs() -> list[str]:
    return [t["expr"] for p in _dashboard()["panels"] for t in p["targets"]]


@pytest.fixture(scope="module")
def served_metrics() -> set[str]:
    """Every series name a real ``/metrics`` offers after some traffic (a counter family's
    ``_total``, a histogram's ``_bucket``/``_sum``/``_count``), over an embedded Redis."""
    settings = Settings(**{**TEST_SETTINGS, "redis_url": "fakeredis://"})
    app = create_app(settings, ov_transport=FakeOV().transport())

    async def scrape() -> str:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app), base_url="http://rpc") as c:
            await c.post("/v1/assemble", json={"sessionId": "s", "messages": oc_turns("q", "a"), "prompt": "q"})
            return (await c.get("/metrics")).text

    text = asyncio.run(scrape())
    names: set[str] = set()
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ")
            if kind == "counter":  # named with or without its _total, by prometheus_client's version
                names.add(name if name.endswith("_total") else f"{name}_total")
            elif kind == "histogram":
                names.update({f"{name}_bucket", f"{name}_sum", f"{name}_count"})
            else:
                names.add(name)
    return names


def test_the_alert_rules_pass_promtools_own_tests() -> None:
    where = DEPLOY / "prometheus"
    assert "SUCCESS: 9 rules found" in _promtool_run("check", "rules", "alerts.yml", cwd=where)
    _promtool_run("test", "rules", "alerts.test.yml", cwd=where)
    tested = set(re.findall(r"alertname: (\w+)", (where / "alerts.test.yml").read_text()))
    assert tested == {r["alert"] for r in _rules()}  # every rule has its test


def test_every_metric_the_rules_and_the_dashboard_read_is_served(served_metrics: set[str]) -> None:
    wanted = {m for expr in [*(r["expr"] for r in _rules()), *_panel_exprs()] for m in METRIC.findall(expr)}
    assert wanted and wanted <= served_metrics, sorted(wanted - served_metrics)


def test_every_dashboard_query_parses_as_promql(tmp_path: Path) -> None:
    exprs = _panel_exprs()
    rules = {
        "groups": [
            {
                "name": "dashboard",
                "rules": [
                    {"record": f"dashboard:panel{i}", "expr": e.replace("$__rate_interval", "5m")}
                    for i, e in enumerate(exprs)
                ],
            }
        ]
    }
    (tmp_path / "dashboard.yml").write_text(yaml.safe_dump(rules))
    assert f"SUCCESS: {len(exprs)} rules found" in _promtool_run("check", "rules", "dashboard.yml", cwd=tmp_path)


def test_the_dashboard_covers_what_an_operator_watches() -> None:
    dash = _dashboard()
    panels = dash["panels"]
    assert len({p["id"] for p in panels}) == len(panels) and dash["uid"] == "ovstream"
    cells = set()
    for p in panels:
        g = p["gridPos"]
        assert g["x"] + g["w"] <= 24
        here = {(x, y) for x in range(g["x"], g["x"] + g["w"]) for y in range(g["y"], g["y"] + g["h"])}
        assert not cells & here, f"panel {p['title']} overlaps another"
        cells |= here
        assert p["datasource"]["uid"] == "${datasource}" and p["targets"]
    exprs = " ".join(_panel_exprs())
    for watched in (
        "ovstream_stream_lag",  # lag
        "ovstream_capture_entries_read_total",  # capture rate
        "ovstream_commit_seconds_bucket",  # commit latency
        "ovstream_commit_outcomes_total",  # commit outcomes
        "ovstream_assemble_seconds_bucket",  # assemble latency
        "ovstream_assemble_results_total",  # answers by reason
        "ovstream_recall_turn_cache_total",  # recall hit ratio
        "ovstream_ov_unavailable_total",  # OV errors
        "ovstream_redis_up",  # Redis availability
    ):
        assert watched in exprs, watched


def _documents(name: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all((DEPLOY / "k8s" / name).read_text()) if d]


def test_the_manifests_are_valid_kubernetes_objects() -> None:
    docs = _documents("ovstream.yaml") + [d for d in _documents("keda.yaml") if d["apiVersion"] == "v1"]
    for doc in docs:
        kubernetes_validate.validate(doc, "1.37.0", strict=True)
    kinds = sorted(f"{d['kind']}/{d['metadata']['name']}" for d in docs)
    assert {"Deployment/ovstream-rpc", "Deployment/ovstream-capture", "Deployment/ovstream-worker"} <= set(kinds)


def _closed(schema: Any) -> Any:
    """The CRD's schema with unknown fields refused (as the API server prunes them: a typo
    would silently vanish), except where it preserves unknown fields."""
    if isinstance(schema, dict):
        out = {k: _closed(v) for k, v in schema.items()}
        if "properties" in out and not out.get("x-kubernetes-preserve-unknown-fields"):
            out.setdefault("additionalProperties", False)
        return out
    if isinstance(schema, list):
        return [_closed(v) for v in schema]
    return schema


def _crd_schema(name: str) -> dict[str, Any]:
    crd = next(d for d in yaml.safe_load_all((SCHEMAS / f"{name}.yaml").read_text()) if d)
    version = next(v for v in crd["spec"]["versions"] if v["served"] and v["storage"])
    return _closed(version["schema"]["openAPIV3Schema"])


def test_the_keda_objects_match_keda_and_watch_what_ovstream_writes() -> None:
    config = next(d for d in _documents("ovstream.yaml") if d["kind"] == "ConfigMap")["data"]
    settings = Settings(redis_url="fakeredis://", shards=int(config["OVSTREAM_SHARDS"]))
    scaled = {d["metadata"]["name"]: d for d in _documents("keda.yaml") if d["kind"] == "ScaledObject"}
    for doc in _documents("keda.yaml"):
        if doc["kind"] == "ScaledObject":
            jsonschema.validate(doc, _crd_schema("keda.sh_scaledobjects"))
        elif doc["kind"] == "TriggerAuthentication":
            jsonschema.validate(doc, _crd_schema("keda.sh_triggerauthentications"))
    for obj in scaled.values():
        for trigger in obj["spec"]["triggers"]:
            assert set(trigger["metadata"]) <= KEDA_METADATA[trigger["type"]], trigger
    capture = scaled["ovstream-capture"]["spec"]
    [trigger] = capture["triggers"]  # one: the RPC's answer, whatever the streams are called now
    assert trigger["type"] == "metrics-api" and trigger.get("metricType") == "AverageValue"
    assert trigger["metadata"]["targetValue"] == "1"  # the answer is a replica count
    service = next(d for d in _documents("ovstream.yaml") if d["kind"] == "Service")
    port = service["spec"]["ports"][0]["port"]
    assert trigger["metadata"]["url"] == f"http://{service['metadata']['name']}:{port}/v1/scaling"
    assert trigger["metadata"]["valueLocation"] == "capture.replicas"
    auths = {d["metadata"]["name"]: d for d in _documents("keda.yaml") if d["kind"] == "TriggerAuthentication"}
    refs = auths[trigger["authenticationRef"]["name"]]["spec"]["secretTargetRef"]
    assert trigger["metadata"]["authMode"] == "bearer" and [r["parameter"] for r in refs] == ["bearerToken"]
    secret_mount = config["OVSTREAM_RPC_TOKEN_FILE"].rsplit("/", 1)[-1]
    assert refs[0]["key"] == secret_mount  # the token the RPC itself reads
    # the cap is ovstream's (the streams read now), so KEDA's ceiling is only a ceiling
    assert capture["maxReplicaCount"] >= 2 * settings.shards
    worker = scaled["ovstream-worker"]["spec"]
    [commits] = worker["triggers"]  # the jobs on every line: one list's length would miss them
    assert commits["type"] == "metrics-api" and commits["metadata"]["url"] == trigger["metadata"]["url"]
    assert commits["metadata"]["valueLocation"] == "commits.replicas"
    assert commits["metadata"]["targetValue"] == "1" and commits["authenticationRef"] == trigger["authenticationRef"]
    deployments = {d["metadata"]["name"] for d in _documents("ovstream.yaml") if d["kind"] == "Deployment"}
    assert {o["spec"]["scaleTargetRef"]["name"] for o in scaled.values()} <= deployments


def test_every_container_and_probe_runs_an_ovstream_command() -> None:
    def parses(argv: list[str]) -> None:
        build_parser(command_in(argv)).parse_args(argv)  # exits (fails the test) on a bad one

    for doc in _documents("ovstream.yaml"):
        if doc["kind"] != "Deployment":
            continue
        for container in doc["spec"]["template"]["spec"]["containers"]:
            parses(container["args"])
            for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
                command = container.get(probe, {}).get("exec", {}).get("command")
                if command:
                    assert command[0] == "ovstream"
                    parses(command[1:])
