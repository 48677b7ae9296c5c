"""Project-wide pytest setup: the e2e control-plane, operator and image/node plugins, and the
preconditions of the tiers."""

pytest_plugins = [
    "tests.support.fixtures",
    "tests.support.operator_fixtures",
    "tests.support.node_plugin",
    "tests.support.tiers",
]
