"""Project-wide pytest setup: loads the e2e control-plane plugin and the image/node plugin."""

pytest_plugins = ["tests.support.fixtures", "tests.support.node_plugin"]
