"""Example Ray Serve applications built on the router's Python API."""
