"""Project-wide pytest setup: the e2e control-plane, operator and image/node plugins."""

pytest_plugins = [
    "tests.support.fixtures",
    "tests.support.operator_fixtures",
    "tests.support.node_plugin",
]
