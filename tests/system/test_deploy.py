"""The deployment files, checked without a Docker engine.

docker-compose.yml parses and wires the stack as docs/OPERATIONS.md says; everything it builds or mounts
exists in the repository; no secret is written in it; the proxy's environment names are real settings;
the Grafana provisioning and dashboard parse and use only metrics the app defines; the Dockerfile's
install step is deploy/install.sh. Running deploy/install.sh itself (a real `pip install .`, ~0.5–2 min)
happens in CI (CI=true) and on demand: `MEMORY_PROXY_TEST_INSTALL=1 pytest tests/system/test_deploy.py`.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client import Counter, Gauge, Histogram, Summary

from memory_proxy import observability
from memory_proxy.settings import SPECS
from tests.support.data import DASHBOARD, ROOT

COMPOSE = ROOT / "docker-compose.yml"
DOCKERFILE = ROOT / "Dockerfile"
SERVICES = {"postgres", "memory-proxy", "open-webui", "prometheus", "grafana"}
SECRET_NAME = re.compile(r"KEY|SECRET|PASSWORD|TOKEN|DATABASE_URL", re.IGNORECASE)
REFERENCE = re.compile(r"\$\{(\w+)(?:(:?[-?])([^}]*))?\}")


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return yaml.safe_load(COMPOSE.read_text())


def service_env(compose: dict[str, Any], name: str) -> dict[str, str]:
    env = compose["services"][name].get("environment", {})
    if isinstance(env, list):
        env = dict(item.split("=", 1) for item in env)
    return {key: str(value) for key, value in env.items()}


def env_example() -> dict[str, str]:
    pairs = {}
    for line in (ROOT / ".env.example").read_text().splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            key, _, value = line.partition("=")
            pairs[key.strip()] = value.strip()
    return pairs


# ---------------------------------------------------------------- docker-compose.yml

def test_compose_has_the_stack_with_health_checks(compose: dict[str, Any]) -> None:
    assert set(compose["services"]) == SERVICES
    for name, service in compose["services"].items():
        test = service.get("healthcheck", {}).get("test")
        assert test and test != ["NONE"], f"{name} has no health check"
    assert "readyz" in json.dumps(compose["services"]["memory-proxy"]["healthcheck"]["test"])
    proxy_deps = compose["services"]["memory-proxy"]["depends_on"]
    assert proxy_deps["postgres"]["condition"] == "service_healthy"
    assert compose["services"]["open-webui"]["depends_on"]["memory-proxy"]["condition"] == "service_healthy"


def test_images_are_pinned(compose: dict[str, Any]) -> None:
    for name, service in compose["services"].items():
        if "build" in service:
            continue
        image = service["image"]
        repository, _, tag = image.rpartition(":")
        assert repository and tag and tag != "latest" and "/" not in tag, f"{name}: {image} is not pinned"
    assert compose["services"]["postgres"]["image"].startswith("pgvector/pgvector:")
    assert compose["services"]["postgres"]["image"].endswith("-pg17")
    assert compose["services"]["open-webui"]["image"] == "ghcr.io/open-webui/open-webui:v0.12.4"


def test_everything_built_or_mounted_exists(compose: dict[str, Any]) -> None:
    declared = set(compose.get("volumes") or {})
    for name, service in compose["services"].items():
        if build := service.get("build"):
            context = ROOT / (build if isinstance(build, str) else build.get("context", "."))
            assert context.is_dir(), f"{name}: build context {context} is missing"
            dockerfile = context / (build.get("dockerfile", "Dockerfile") if isinstance(build, dict) else "Dockerfile")
            assert dockerfile.is_file(), f"{name}: {dockerfile} is missing"
        for volume in service.get("volumes", []):
            source = volume.split(":")[0] if isinstance(volume, str) else volume["source"]
            if source.startswith((".", "/")):
                assert (ROOT / source).exists(), f"{name}: mounted {source} does not exist in the repository"
            else:
                assert source in declared, f"{name}: named volume {source} is not declared"


def test_no_secret_is_written_in_the_compose_file(compose: dict[str, Any]) -> None:
    for name in compose["services"]:
        for key, value in service_env(compose, name).items():
            for var, operator, default in REFERENCE.findall(value):
                if SECRET_NAME.search(var) and operator.endswith("-"):
                    assert default == "", f"{name}.{key}: a default value for the secret {var}"
            if not SECRET_NAME.search(key):
                continue
            literal = REFERENCE.sub("", value)
            if "://" in literal:  # a URL: its password must be a reference
                userinfo = value.split("://", 1)[1].split("@", 1)
                assert len(userinfo) == 1 or REFERENCE.fullmatch(userinfo[0].split(":", 1)[-1]), (
                    f"{name}.{key}: the URL's password is written in the file")
            else:
                assert literal == "", f"{name}.{key} is not only a ${{VAR}} reference: {value!r}"


def test_every_variable_the_compose_file_reads_is_in_env_example(compose: dict[str, Any]) -> None:
    example = env_example()
    used = {var for var, _, _ in REFERENCE.findall(COMPOSE.read_text())}
    assert used - set(example) == set(), "variables missing from .env.example"
    required = {var for var, operator, _ in REFERENCE.findall(COMPOSE.read_text()) if operator.endswith("?")}
    for var in required:  # placeholders only, never something that could be a real secret
        assert example[var] in ("", "change-me") or example[var].startswith("change-me"), var


def test_the_proxys_environment_uses_only_real_settings(compose: dict[str, Any]) -> None:
    env = service_env(compose, "memory-proxy")
    assert set(env) - {spec.name for spec in SPECS} == set()
    assert env["MEMORY_PROXY_HOST"] == "0.0.0.0"
    assert env["DATABASE_URL"].startswith("postgresql://") and "@postgres:5432/" in env["DATABASE_URL"]


def test_openwebui_is_wired_to_the_proxy(compose: dict[str, Any]) -> None:
    proxy, webui = service_env(compose, "memory-proxy"), service_env(compose, "open-webui")
    assert webui["OPENAI_API_BASE_URL"] == f"http://memory-proxy:{proxy['MEMORY_PROXY_PORT']}/v1"
    assert webui["ENABLE_FORWARD_USER_INFO_HEADERS"] == "true"
    assert webui["ENABLE_MEMORIES"] == "false"
    # the same secrets on both sides: the proxy's key, and the JWT secret signing the user header
    assert REFERENCE.findall(webui["OPENAI_API_KEY"])[0][0] == REFERENCE.findall(proxy["PROXY_API_KEYS"])[0][0]
    assert (REFERENCE.findall(webui["FORWARD_USER_INFO_HEADER_JWT_SECRET"])[0][0]
            == REFERENCE.findall(proxy["USER_JWT_SECRET"])[0][0])
    configs = json.loads(webui["OPENAI_API_CONFIGS"])  # connection 0 = OPENAI_API_BASE_URL
    assert configs["0"]["headers"] == {"X-OpenWebUI-Task": "{{TASK}}"}
    assert configs["0"].get("enable", True) is True


def test_prometheus_scrapes_the_proxy(compose: dict[str, Any]) -> None:
    config = yaml.safe_load((ROOT / "deploy" / "prometheus.yml").read_text())
    [job] = [j for j in config["scrape_configs"] if j["job_name"] == "memory-proxy"]
    assert job.get("metrics_path", "/metrics") == "/metrics"
    port = service_env(compose, "memory-proxy")["MEMORY_PROXY_PORT"]
    assert job["static_configs"][0]["targets"] == [f"memory-proxy:{port}"]
    mounts = compose["services"]["prometheus"]["volumes"]
    assert "./deploy/prometheus.yml:/etc/prometheus/prometheus.yml:ro" in mounts


# ---------------------------------------------------------------- Grafana

def test_grafana_provisioning_parses_and_points_at_the_dashboard(compose: dict[str, Any]) -> None:
    mounts = dict(v.split(":")[:2] for v in compose["services"]["grafana"]["volumes"])
    [datasources] = (ROOT / "grafana" / "provisioning" / "datasources").glob("*.yml")
    [source] = yaml.safe_load(datasources.read_text())["datasources"]
    assert source["type"] == "prometheus" and source["url"] == "http://prometheus:9090"
    [dashboards] = (ROOT / "grafana" / "provisioning" / "dashboards").glob("*.yml")
    [provider] = yaml.safe_load(dashboards.read_text())["providers"]
    assert mounts["./grafana/dashboards"] == provider["options"]["path"]
    assert mounts["./grafana/provisioning"] == "/etc/grafana/provisioning"
    dashboard = json.loads(DASHBOARD.read_text())
    [variable] = [v for v in dashboard["templating"]["list"] if v["type"] == "datasource"]
    assert variable["query"] == "prometheus" and variable["current"]["value"] == source["uid"]


def defined_metric_names() -> set[str]:
    """Every sample name the app can expose: each metric of memory_proxy/observability.py with its suffixes."""
    suffixes = {"counter": ("_total", "_created"), "gauge": ("",), "histogram": ("_bucket", "_sum", "_count", "_created"),
                "summary": ("", "_sum", "_count", "_created")}
    names = set()
    for value in vars(observability).values():
        if isinstance(value, Counter | Gauge | Histogram | Summary):
            for family in value.collect():
                names |= {family.name + suffix for suffix in suffixes[family.type]}
    return names


PROMQL_WORDS = {"and", "or", "unless", "by", "without", "on", "ignoring", "group_left", "group_right", "bool",
                "offset", "inf", "nan"}


def metric_names_in(expr: str) -> set[str]:
    """Metric names of a PromQL expression: identifiers that are not functions, keywords, label names,
    label values, durations or Grafana variables."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)          # label values
    text = re.sub(r"\{[^}]*\}", "", text)                     # label matchers
    text = re.sub(r"\[[^\]]*\]", "", text)                    # range windows ($__rate_interval…)
    text = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", text)  # label lists
    names = set()
    for match in re.finditer(r"[A-Za-z_:][A-Za-z0-9_:]*", text):
        word = match.group(0)
        if word.lower() in PROMQL_WORDS or text[match.end():].lstrip().startswith("("):
            continue
        names.add(word)
    return names


def test_dashboard_panels_use_only_metrics_the_app_defines() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    defined = defined_metric_names()
    assert {"memory_proxy_requests_total", "memory_proxy_added_latency_seconds_bucket",
            "memory_proxy_job_queue", "memory_proxy_memories"} <= defined
    panels = [p for p in dashboard["panels"] if p["type"] != "row"]
    assert len(panels) >= 20
    used: set[str] = set()
    for panel in panels:
        assert panel["targets"], f"{panel['title']} has no query"
        assert panel["fieldConfig"]["defaults"].get("unit"), f"{panel['title']} has no unit"
        for target in panel["targets"]:
            names = metric_names_in(target["expr"])
            assert names, f"{panel['title']}: no metric in {target['expr']}"
            assert names <= defined, f"{panel['title']}: {names - defined} not defined in memory_proxy/observability.py"
            used |= names
    # the list: every one of these has a panel
    for metric in ("requests_total", "upstream_errors_total", "added_latency_seconds_bucket",
                   "upstream_first_byte_seconds_bucket", "retrieval_total", "retrieval_seconds_bucket",
                   "memories_injected_sum", "fail_open_total", "job_queue", "jobs_total", "decisions_total",
                   "memories", "memory_users"):
        assert f"memory_proxy_{metric}" in used, f"no panel shows memory_proxy_{metric}"
    assert len({p["id"] for p in dashboard["panels"]}) == len(dashboard["panels"])


def test_metric_name_parsing() -> None:
    assert metric_names_in('histogram_quantile(0.95, sum by (le, kind) (rate(a_bucket{kind="chat"}[$__rate_interval])))'
                           ) == {"a_bucket"}
    assert metric_names_in("sum(rate(x_total[5m])) / sum(y) and on (job) up") == {"x_total", "y", "up"}


# ---------------------------------------------------------------- Dockerfile and deploy/install.sh

def dockerfile_instructions() -> list[tuple[str, str]]:
    text = re.sub(r"\\\n", " ", DOCKERFILE.read_text())
    out = []
    for line in text.splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            keyword, _, rest = line.strip().partition(" ")
            out.append((keyword.upper(), rest.strip()))
    return out


def test_the_dockerfile_installs_with_deploy_install_sh() -> None:
    instructions = dockerfile_instructions()
    runs = [rest for keyword, rest in instructions if keyword == "RUN"]
    assert any(re.search(r"(^|\s)(sh\s+)?\S*deploy/install\.sh\s+/opt/memory-proxy", run) for run in runs), runs
    assert not any("pip install" in run for run in runs), "install steps belong in deploy/install.sh"
    assert ("FROM", "python:3.11-slim-bookworm") in instructions
    assert [rest for keyword, rest in instructions if keyword == "CMD"] == ['["memory-proxy", "serve"]']
    assert any(k == "HEALTHCHECK" and "/readyz" in rest for k, rest in instructions)
    assert any(k == "USER" for k, _ in instructions), "the image runs as root"
    assert os.access(ROOT / "deploy" / "install.sh", os.X_OK)


def test_dockerignore_lets_in_what_the_install_needs() -> None:
    allowed = {line[1:].rstrip("/") for line in (ROOT / ".dockerignore").read_text().splitlines()
               if line.startswith("!")}
    assert {"pyproject.toml", "README.md", "memory_proxy", "deploy/install.sh"} <= allowed
    for path in allowed:
        assert (ROOT / path).exists(), path
    assert "*" in (ROOT / ".dockerignore").read_text().splitlines()  # an allow-list: .env, .venv stay out


@pytest.mark.slow
@pytest.mark.skipif(os.environ.get("MEMORY_PROXY_TEST_INSTALL") != "1" and os.environ.get("CI") != "true",
                    reason="slow (a real `pip install .`, 0.5–2 min): runs in CI, or set MEMORY_PROXY_TEST_INSTALL=1")
def test_deploy_install_sh_installs_a_working_package(tmp_path: Path) -> None:
    """SLOW (CI, or opt-in): the image's install steps, run as the Dockerfile runs them, into a fresh venv."""
    result = subprocess.run(["sh", str(ROOT / "deploy" / "install.sh"), str(tmp_path / "prefix")],
                            env={**os.environ, "PYTHON": sys.executable}, capture_output=True, text=True,
                            timeout=600, check=False)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "install.sh: ok:" in result.stdout
    version = subprocess.run([str(tmp_path / "prefix" / "bin" / "memory-proxy"), "--help"],
                             capture_output=True, text=True, timeout=60, check=False)
    assert version.returncode == 0


def test_prometheus_config_passes_promtool() -> None:
    """promtool comes with the `prometheus` package (.ci/install-system-packages.sh)."""
    import shutil

    promtool = shutil.which("promtool")
    if not promtool:
        pytest.skip("promtool is missing (apt-get install prometheus)")
    config = ROOT / "deploy" / "prometheus.yml"
    result = subprocess.run([promtool, "check", "config", "--syntax-only", str(config)],
                            capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
