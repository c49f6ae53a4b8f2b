"""The replica's endpoints on one model, written against `deployments.engine_client`: chat and
legacy completions (`chat`, `completions`), `POST /tokenize` (`tokenize`), the choices they
stream (`choices`) and their off-loop preparation (`preparation`)."""
