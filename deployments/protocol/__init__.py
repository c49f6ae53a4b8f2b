"""The OpenAI protocol (pydantic request/response models), shared by router, deployments, tests."""
