"""Shared pytest configuration: the service fixtures live in plugins beside this file."""

pytest_plugins = ["tests.services", "tests.kube", "tests.cluster", "tests.alerting", "tests.deploy.image"]
