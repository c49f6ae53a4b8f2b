"""`ascend-router kuberay`: the RayService manifest against KubeRay's CRD, and the shipped one.

The schema is the v1 `openAPIV3Schema` of KubeRay v1.7.0's `ray.io_rayservices.yaml`
(tests/data/kuberay_rayservice_v1.7.0.schema.json, see tests/data/README.md). `jsonschema` reads it
with one adapter: an object schema with `properties` refuses other keys, as the API server's
strict field validation does (a structural schema would otherwise prune a misspelt field
silently). Controller-gen writes int-or-string fields as `anyOf: [integer, string]`, which
`jsonschema` checks as is; the `x-kubernetes-*` keys it ignores. The three CEL rules of the CRD
guard `managedBy` and `gcsFaultToleranceOptions.backend`, which the generator never writes.
"""

from __future__ import annotations

import json
import shlex
import shutil
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from cli_helpers import run_command

from cli import kuberay_cmd
from operate.kuberay import ascend_pod

ROOT = Path(__file__).resolve().parents[2]
PROD = "configs/prod.yaml"
SHIPPED = "configs/kuberay/prod-rayservice.yaml"
REGENERATE = f"ascend-router kuberay {PROD} -o {SHIPPED}"
SCHEMA_FILE = ROOT / "tests/data/kuberay_rayservice_v1.7.0.schema.json"


def strict(schema: dict[str, Any]) -> dict[str, Any]:
    """`schema` with `additionalProperties: false` on every object schema that lists properties
    and neither allows other keys nor preserves unknown fields."""
    out = dict(schema)
    if "properties" in out:
        out["properties"] = {k: strict(v) for k, v in out["properties"].items()}
        if "additionalProperties" not in out and not out.get(
            "x-kubernetes-preserve-unknown-fields"
        ):
            out["additionalProperties"] = False
    if isinstance(out.get("additionalProperties"), dict):
        out["additionalProperties"] = strict(out["additionalProperties"])
    if isinstance(out.get("items"), dict):
        out["items"] = strict(out["items"])
    for key in ("anyOf", "allOf", "oneOf"):
        if key in out:
            out[key] = [strict(s) for s in out[key]]
    return out


@pytest.fixture(scope="module")
def validator() -> jsonschema.Draft4Validator:
    data = json.loads(SCHEMA_FILE.read_text())
    assert data["kuberay_version"] == "v1.7.0"
    schema = strict(data["schema"])
    jsonschema.Draft4Validator.check_schema(schema)
    return jsonschema.Draft4Validator(schema)


def schema_errors(validator: jsonschema.Draft4Validator, manifest: dict[str, Any]) -> list[str]:
    return [
        f"{'.'.join(map(str, e.absolute_path))}: {e.message}"
        for e in validator.iter_errors(manifest)
    ]


def generate(tmp_path: Path, *flags: str, config: str = PROD) -> tuple[str, dict[str, Any]]:
    """Run the CLI in the repository root, writing to tmp_path; (file text, manifest)."""
    out = tmp_path / "rayservice.yaml"
    assert run_command(kuberay_cmd, ["kuberay", config, *flags, "-o", str(out)]) == 0
    text = out.read_text()
    return text, yaml.safe_load(text)


@pytest.fixture(autouse=True)
def _in_repo_root(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)


def test_shipped_manifest_is_regenerated_from_prod(tmp_path: Path) -> None:
    # The same command in a copy of the tree, so the shipped file is compared, never rewritten.
    (tmp_path / "configs").mkdir()
    shutil.copy(ROOT / PROD, tmp_path / PROD)
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(tmp_path)
        assert run_command(kuberay_cmd, shlex.split(REGENERATE)[1:]) == 0
    assert (tmp_path / SHIPPED).read_text() == (ROOT / SHIPPED).read_text(), (
        f"{SHIPPED} is stale: regenerate it with `{REGENERATE}`"
    )


def test_shipped_manifest_matches_the_crd_schema(validator: jsonschema.Draft4Validator) -> None:
    manifest = yaml.safe_load((ROOT / SHIPPED).read_text())
    assert schema_errors(validator, manifest) == []


@pytest.mark.parametrize(
    "flags",
    [
        [],
        ["--models-host-path", "/data/models", "--no-driver-mounts"],
        ["--workers", "3", "--max-workers", "3", "--npus-per-worker", "16"],
        ["--name", "llm", "--image", "registry.example.com/ascend-router:1", "--worker-cpus", "96"],
    ],
    ids=["defaults", "host-path-no-driver-mounts", "fixed-workers", "renamed"],
)
def test_manifest_matches_the_crd_schema(
    validator: jsonschema.Draft4Validator, tmp_path: Path, flags: list[str]
) -> None:
    _, manifest = generate(tmp_path, *flags)
    assert schema_errors(validator, manifest) == []
    spec = manifest["spec"]
    assert "managedBy" not in spec and "managedBy" not in spec["rayClusterConfig"]
    assert "gcsFaultToleranceOptions" not in spec["rayClusterConfig"]


WORKER = "spec.rayClusterConfig.workerGroupSpecs.0"


@pytest.mark.parametrize(
    ("path", "value", "complaint"),
    [
        (f"{WORKER}.replicas", "1", "not of type"),
        ("spec.rayClusterConfig.headGroupSpec.rayStartParam", {}, "Additional"),
        (f"{WORKER}.template.spec.containers.0.resources.limits.memory", "512GB", "does not match"),
    ],
    ids=["string-replicas", "misspelt-field", "bad-quantity"],
)
def test_the_schema_check_catches_broken_manifests(
    validator: jsonschema.Draft4Validator, path: str, value: Any, complaint: str
) -> None:
    manifest = yaml.safe_load((ROOT / SHIPPED).read_text())
    *parents, last = [int(k) if k.isdigit() else k for k in path.split(".")]
    node = manifest
    for key in parents:
        node = node[key]
    node[last] = value
    errors = schema_errors(validator, manifest)
    assert errors and complaint in errors[0], errors


def test_serve_config_v2_round_trips_to_the_serve_config() -> None:
    manifest = yaml.safe_load((ROOT / SHIPPED).read_text())
    embedded = yaml.safe_load(manifest["spec"]["serveConfigV2"])
    assert embedded == yaml.safe_load((ROOT / PROD).read_text())


def test_npu_workers_declare_what_they_request(tmp_path: Path) -> None:
    from ray.autoscaler._private.kuberay.autoscaling_config import _get_custom_resources

    _, manifest = generate(tmp_path)
    cluster = manifest["spec"]["rayClusterConfig"]
    (group,) = cluster["workerGroupSpecs"]
    (container,) = group["template"]["spec"]["containers"]
    limits, requests = container["resources"]["limits"], container["resources"]["requests"]
    assert limits == requests and limits[ascend_pod.NPU_RESOURCE] == 8
    value = group["rayStartParams"]["resources"]
    # KubeRay (getResourcesMap): trim quotes, parse JSON; the shell of `ray start`; Ray's autoscaler.
    assert json.loads(value.strip("'\"` ")) == {"NPU": 8}
    (arg,) = shlex.split(f"--resources={value}")
    assert json.loads(arg.removeprefix("--resources=")) == {"NPU": 8}
    assert _get_custom_resources({}, group["rayStartParams"], group["groupName"]) == {"NPU": 8}
    # prod: 19 NPUs at the smallest sizes need three nodes (DeepSeek-V4-Flash's 8 ranks take
    # one whole, Qwen2.5-32B's TP 2 x PP 2 and DeepSeek-V2-Lite's 4 the second); at the largest
    # (qwen 7B at 4 replicas, Qwen2.5-32B at 2) a fourth
    assert (group["minReplicas"], group["replicas"], group["maxReplicas"]) == (3, 3, 4)
    assert cluster["enableInTreeAutoscaling"] is True
    assert cluster["headGroupSpec"]["rayStartParams"]["num-cpus"] == "0"
    assert container["args"] == ["source /usr/local/Ascend/ascend-toolkit/set_env.sh"]


def test_pods_mount_what_they_declare_and_the_models_everywhere(tmp_path: Path) -> None:
    _, manifest = generate(tmp_path)
    cluster = manifest["spec"]["rayClusterConfig"]
    pods = [cluster["headGroupSpec"]["template"]["spec"]]
    pods += [g["template"]["spec"] for g in cluster["workerGroupSpecs"]]
    for pod in pods:
        volumes = {v["name"]: v for v in pod["volumes"]}
        mounts = {m["name"]: m for m in pod["containers"][0]["volumeMounts"]}
        assert set(mounts) == set(volumes)
        assert mounts["models"] == {"name": "models", "mountPath": "/models", "readOnly": True}
        assert volumes["models"]["persistentVolumeClaim"]["claimName"] == "ascend-router-models"
    worker_volumes = {v["name"]: v for v in pods[1]["volumes"]}
    for mount in pods[1]["containers"][0]["volumeMounts"]:
        host = worker_volumes[mount["name"]].get("hostPath")
        if host:  # MindCluster: driver files sit at the host's own paths in the container
            assert host["path"] == mount["mountPath"] and mount["readOnly"]
    assert {
        "/usr/local/Ascend/driver",
        "/usr/local/dcmi",
        "/usr/local/bin/npu-smi",
        "/etc/ascend_install.info",
    } <= {v["hostPath"]["path"] for v in worker_volumes.values() if "hostPath" in v}


def test_head_exposes_the_serve_port_of_http_options(tmp_path: Path) -> None:
    doc = yaml.safe_load((ROOT / PROD).read_text())
    doc["http_options"]["port"] = 9000
    config = tmp_path / "prod9000.yaml"
    config.write_text(yaml.safe_dump(doc))
    _, manifest = generate(tmp_path, config=str(config))
    (head,) = manifest["spec"]["rayClusterConfig"]["headGroupSpec"]["template"]["spec"][
        "containers"
    ]
    assert {"name": "serve", "containerPort": 9000} in head["ports"]
    assert yaml.safe_load(manifest["spec"]["serveConfigV2"]) == doc


def test_header_command_regenerates_the_same_file(tmp_path: Path) -> None:
    text, _ = generate(tmp_path, "--workers", "3", "--no-driver-mounts", "--name", "npu-llm")
    command = text.splitlines()[2].removeprefix("#").strip()
    assert command.startswith("ascend-router kuberay configs/prod.yaml --name npu-llm")
    assert run_command(kuberay_cmd, shlex.split(command)[1:]) == 0
    assert (tmp_path / "rayservice.yaml").read_text() == text


def test_stdout_when_no_output_is_given(capsys: pytest.CaptureFixture[str]) -> None:
    from cli.main import main

    assert main(["kuberay", PROD]) == 0
    manifest = yaml.safe_load(capsys.readouterr().out)
    assert manifest["kind"] == "RayService" and manifest["apiVersion"] == "ray.io/v1"


@pytest.mark.parametrize(
    ("flags", "config", "message"),
    [
        ([], "configs/local.yaml", "http_options.host is '127.0.0.1'"),
        (["--npus-per-worker", "2"], PROD, "deepseek-v4-flash: one replica needs 8 NPUs"),
        (
            ["--models-mount", "/weights"],
            PROD,
            "'/models/Qwen2.5-7B-Instruct' is not under /weights",
        ),
        (["--name", "Ascend_Router"], PROD, "DNS-1035"),
        (["--worker-memory", "512GB"], PROD, "not a positive Kubernetes quantity"),
        (["--workers", "3", "--max-workers", "2"], PROD, "below --workers 3"),
        ([], "configs/missing.yaml", "cannot read configs/missing.yaml"),
    ],
    ids=[
        "loopback",
        "too-few-npus",
        "path-off-volume",
        "bad-name",
        "bad-quantity",
        "max-below-min",
        "missing-file",
    ],
)
def test_unusable_input_exits_2_with_the_reason(
    capsys: pytest.CaptureFixture[str], flags: list[str], config: str, message: str
) -> None:
    assert run_command(kuberay_cmd, ["kuberay", config, *flags]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and message in captured.err, captured.err


def _write_prod_variant(tmp_path: Path, edit: Any) -> str:
    doc = yaml.safe_load((ROOT / PROD).read_text())
    edit(doc)
    path = tmp_path / "serve.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return str(path)


def _router_models(doc: dict[str, Any]) -> list[dict[str, Any]]:
    app = next(a for a in doc["applications"] if a["import_path"] == "router.app:build_app")
    return app["args"]["models"]


def test_strict_spread_gets_one_worker_per_rank(tmp_path: Path) -> None:
    def spread(doc: dict[str, Any]) -> None:
        model = next(m for m in _router_models(doc) if m["tensor_parallel_size"] > 1)
        model["tensor_parallel_size"] = 4
        model.setdefault("engine", {})["tensor_parallel_placement"] = "STRICT_SPREAD"

    from operate.kuberay.options import KubeRayOptions
    from operate.kuberay.render import generate

    generated = generate(_write_prod_variant(tmp_path, spread), KubeRayOptions())
    assert generated.workers >= 4
    assert "STRICT_SPREAD: on 4 nodes" in generated.text


def test_head_turns_off_torch_backend_autoload() -> None:
    manifest = yaml.safe_load((ROOT / SHIPPED).read_text())
    head = manifest["spec"]["rayClusterConfig"]["headGroupSpec"]["template"]["spec"]
    (container,) = head["containers"]
    assert {"name": "TORCH_DEVICE_BACKEND_AUTOLOAD", "value": "0"} in container["env"]


def test_cann_set_env_is_shell_quoted() -> None:
    assert ascend_pod.cann_args("/opt/my cann/set_env.sh; rm -rf /") == [
        "source '/opt/my cann/set_env.sh; rm -rf /'"
    ]
    assert ascend_pod.cann_args(ascend_pod.DEFAULT_CANN_SET_ENV) == [
        f"source {ascend_pod.DEFAULT_CANN_SET_ENV}"
    ]


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--max-workers", "1"], "--max-workers 1: the deployments need 3"),
        (["--workers", "1"], "--workers 1: the deployments need 3"),
        (["--npus-per-worker", "5000"], "need 1..4096"),
        (["--workers", "10001"], "need 1..10000"),
        (["--head-cpus", "0"], "not a positive Kubernetes quantity"),
        (["--worker-memory=-1Gi"], "not a positive Kubernetes quantity"),
        (["--worker-cpus", "1e999"], "not a positive Kubernetes quantity"),
        (["--models-pvc", "Models_PVC"], "DNS-1123"),
        (["--image", "my image"], "without spaces"),
        (["--image", ""], "without spaces"),
        (["--cann-set-env", "set_env.sh"], "absolute path"),
    ],
)
def test_options_that_cannot_work_exit_2(
    capsys: pytest.CaptureFixture[str], flags: list[str], message: str
) -> None:
    assert run_command(kuberay_cmd, ["kuberay", PROD, *flags]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and message in captured.err, captured.err
    assert len(captured.err.strip().splitlines()) == 1


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda doc: doc.update(http_options=[1]), "http_options must be a mapping"),
        (lambda doc: doc["http_options"].update(port=[1]), "port must be an integer"),
        (lambda doc: doc["http_options"].update(port=70000), "port must be an integer"),
        (
            lambda doc: _router_models(doc)[0]["deployment"]["ray_actor_options"].update(
                resources=[1]
            ),
            "resources must be a mapping",
        ),
        (
            lambda doc: _router_models(doc)[0]["deployment"]["ray_actor_options"].update(
                resources={"NPU": -1}
            ),
            "non-negative number",
        ),
    ],
    ids=["http-list", "port-list", "port-big", "resources-list", "negative-npu"],
)
def test_malformed_configs_exit_2_not_a_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], edit: Any, message: str
) -> None:
    config = _write_prod_variant(tmp_path, edit)
    assert run_command(kuberay_cmd, ["kuberay", config]) == 2
    assert message in capsys.readouterr().err


def test_unwritable_output_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    afile = tmp_path / "afile"
    afile.write_text("x")
    for out in (tmp_path, afile / "x.yaml"):
        assert run_command(kuberay_cmd, ["kuberay", PROD, "-o", str(out)]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"ascend-router kuberay: error: cannot write {out}"), err
