"""Engine metrics across replicas: each replica pushes its exposition (`push`) to the
application's one board (`board`), which the router's `/metrics` reads."""
