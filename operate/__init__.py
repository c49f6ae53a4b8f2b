"""Operator tooling above the serving layers: doctor, plan, KubeRay, systemd, preflight."""
