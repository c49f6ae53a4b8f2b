"""`python -m load_tests.spec_on_off_config`: a Serve config serving a model with and without
speculative decoding side by side, for `load_tests.compare` (issue #16 (b) and (c)).

It copies `configs/speculative.yaml` and appends a second deployment of `--model` (default
`smollm2-long`) named `<model>-nospec`, identical but for `engine.speculative`, so that one
server (one Ray cluster, the same router, the same weights and graphs) answers both sides of
the comparison: A = `<model>`, B = `<model>-nospec`. Both replicas stay resident; only the one
under load runs, since compare loads one side at a time.

    python -m load_tests.spec_on_off_config --out /tmp/spec-on-off.yaml
    serve run /tmp/spec-on-off.yaml        # -> http://127.0.0.1:8000/v1

See `load_tests.compare` for the benchmark commands.
"""

from __future__ import annotations

import argparse
import copy
from pathlib import Path
from typing import Any

import yaml

from configs.serve_file import APP_IMPORT_PATH, load_app_config, load_serve_document

SOURCE = Path(__file__).resolve().parent.parent / "configs" / "speculative.yaml"
SUFFIX = "-nospec"


def on_off_document(source: Path, model_id: str, port: int | None = None) -> dict[str, Any]:
    """`source`'s Serve document plus `<model_id>-nospec` (no `speculative`); `port` set: the
    HTTP port instead of the file's.

    Raises:
        ValueError: `source` has no model `model_id`, or it does not speculate.
    """
    doc = load_serve_document(source)
    app = next(a for a in doc["applications"] if a.get("import_path") == APP_IMPORT_PATH)
    models = app["args"]["models"]
    model = next((m for m in models if m.get("model_id") == model_id), None)
    if model is None or not (model.get("engine") or {}).get("speculative"):
        raise ValueError(f"{source}: no model {model_id!r} with `engine.speculative`")
    off = copy.deepcopy(model)
    off["model_id"] = model_id + SUFFIX
    del off["engine"]["speculative"]
    models.append(off)
    if port is not None:
        doc.setdefault("http_options", {})["port"] = port
    return doc


def main(argv: list[str] | None = None) -> int:
    """Write the document (validated as `serve run` would load it) to `--out`."""
    p = argparse.ArgumentParser(prog="python -m load_tests.spec_on_off_config", description=__doc__)
    p.add_argument("--source", type=Path, default=SOURCE, help="a config whose model speculates")
    p.add_argument("--model", default="smollm2-long", help="the model to serve twice")
    p.add_argument("--port", type=int, default=None, help="HTTP port (default: the source's)")
    p.add_argument("--out", type=Path, required=True, help="where to write (e.g. under /tmp)")
    args = p.parse_args(argv)
    doc = on_off_document(args.source, args.model, args.port)
    args.out.write_text(
        f"# {args.source} + {args.model}{SUFFIX} (no speculation): load_tests.spec_on_off_config\n"
        + yaml.safe_dump(doc, sort_keys=False)
    )
    load_app_config(args.out)  # raises if `serve run` would reject it
    print(f"wrote {args.out}: models {args.model} (speculative) and {args.model}{SUFFIX}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
