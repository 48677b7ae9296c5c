"""Project-wide pytest setup: only loads the e2e control-plane plugin."""

pytest_plugins = ["tests.support.fixtures", "tests.support.operator_fixtures"]
