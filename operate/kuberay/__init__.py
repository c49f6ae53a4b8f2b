"""KubeRay `RayService` manifests generated from the router's Serve config.

`rayservice.build_rayservice` turns a Serve YAML (the file `serve run` takes) into one
`ray.io/v1` `RayService` whose `serveConfigV2` is that same config; `npu_plan` sizes the NPU
worker group from the config; `ascend_pod` holds what an Ascend container needs on Kubernetes.
`ascend-router kuberay CONFIG.yaml -o OUT` (cli/kuberay_cmd.py) writes it;
`configs/kuberay/prod-rayservice.yaml` is the manifest of `configs/prod.yaml`, regenerated, never
edited.
"""
